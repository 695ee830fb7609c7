"""Where the topic source finds a topic's queues: the topic's route, read with ROUTE through
the servers the user gave (docs/cluster.md), and one client per broker group, talking to
the group's primary.

A queue is named in the source's offsets by a key: its queue id (``"0"``) for a topic
outside a cluster, the layout the source always had, and ``"group/queue id"``
(``"g2/0"``) for a topic routed over broker groups in a cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fmq.client.cluster.route_table import Route, knows_no_route, old_server_route, parse_route
from fmq.errors import AccessDenied, FMQError, InvalidArgument, UnknownTopic
from fmq.protocol import Op
from fmq.spark.errors import GroupUnreachable
from fmq.spark.topic_client import QueueClient

#: The group of a topic outside a cluster: the servers the user gave.
SINGLE = ""

#: One queue the source reads: (topic, broker group or SINGLE, local queue id).
Queue = tuple[str, str, int]


def queue_key(group: str, queue_id: int) -> str:
    """The queue's key in the offsets JSON."""
    return str(queue_id) if group == SINGLE else f"{group}/{queue_id}"


def split_key(key: str) -> tuple[str, int]:
    """(group, queue id) of an offsets key; InvalidArgument when it is neither form."""
    group, _slash, qid = str(key).rpartition("/")
    if not qid.isdigit() or (_slash and not group):
        raise InvalidArgument(f"queue {key!r} is not a queue id: give a whole number (\"0\") "
                              f"or, for a topic over several broker groups, group/queue "
                              f"(\"g2/0\")")
    return group, int(qid)


def read_route(client: QueueClient, topic: str) -> Route:
    """``topic``'s route as ROUTE answers it. Read as outside a cluster, through the
    servers given: a node outside a cluster, a server without ROUTE, a user who may not
    read routes (describe), a topic with no route (a cluster node's own topic: version 0,
    or UnknownTopic where routes are not created on demand)."""
    try:
        route = parse_route(client.call(Op.ROUTE, {"topic": topic})["json"])
    except (AccessDenied, UnknownTopic):
        return old_server_route(topic)
    except FMQError as exc:
        if knows_no_route(exc):
            return old_server_route(topic)
        raise
    return old_server_route(topic) if route.version == 0 else route


def group_primary(route: Route, group: str) -> str:
    """The address of ``group``'s primary in ``route``; GroupUnreachable when the route
    names none (or no longer has the group)."""
    known = route.broker_groups.get(group)
    if known is None or not known.primary:
        reason = ("the route names no primary for it" if route.route.entry(group)
                  else "the topic's route no longer has it")
        raise GroupUnreachable(group, route.route.topic, reason)
    return known.primary


class GroupClients:
    """The driver's clients: one to the servers given (routes, and topics outside a
    cluster) and one per broker group of a routed topic, to its primary."""

    def __init__(self, servers: str | Sequence[str], **access: Any) -> None:
        self.access = access
        self.base = QueueClient(servers, **access)
        self.routes: dict[str, Route] = {}
        self._groups: dict[str, tuple[str, QueueClient]] = {}  # group -> (address, client)

    def __enter__(self) -> GroupClients:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def queues(self, topics: Sequence[str]) -> list[Queue]:
        """Every queue of ``topics`` now: each topic's route read again (a route may have
        grown or shrunk since the last call)."""
        out: list[Queue] = []
        for topic in topics:
            route = self.routes[topic] = read_route(self.base, topic)
            if route.single:
                out += [(topic, SINGLE, q) for q in range(self.base.queues_per_topic())]
            else:
                out += [(topic, e.group, q) for e in route.route.entries
                        for q in range(e.queues)]
        return out

    def client(self, topic: str, group: str) -> QueueClient:
        """The client reading ``group``'s queues of ``topic`` (after :meth:`queues`)."""
        if group == SINGLE:
            return self.base
        address = group_primary(self.routes[topic], group)
        held = self._groups.get(group)
        if held is not None and held[0] == address:
            return held[1]
        if held is not None:  # a fail-over: the route names a new primary
            held[1].close()
        client = QueueClient(address, **self.access)
        self._groups[group] = (address, client)
        return client

    def queue_range(self, topic: str, group: str, queue_id: int) -> tuple[int, int]:
        """(min, next) of one queue, with the client's retries; a group whose primary does
        not answer raises GroupUnreachable."""
        try:
            return self.client(topic, group).queue_range(topic, queue_id)
        except FMQError as exc:
            if group == SINGLE or not exc.retriable:
                raise
            raise GroupUnreachable(group, topic, str(exc)) from None

    def offset_for_time(self, topic: str, group: str, queue_id: int, ms: int) -> int:
        try:
            return self.client(topic, group).offset_for_time(topic, queue_id, ms)
        except FMQError as exc:
            if group == SINGLE or not exc.retriable:
                raise
            raise GroupUnreachable(group, topic, str(exc)) from None

    def describe(self, topic: str) -> str:
        """The queues ``topic`` has, for an error message."""
        route = self.routes[topic]
        if route.single:
            n = self.base.queues_per_topic()
            return f"0 .. {n - 1} (the server has {n} queues per topic)"
        return ", ".join(f"{e.group}/0 .. {e.group}/{e.queues - 1}" for e in route.route.entries)

    def close(self) -> None:
        for _address, client in self._groups.values():
            client.close()
        self._groups.clear()
        self.base.close()


def reading_client(servers: str | Sequence[str], topic: str, group: str,
                   access: dict[str, Any]) -> QueueClient:
    """A task's client for ``group``'s queues of ``topic``: the servers given outside a
    cluster; in one, the primary the route names now (it may have failed over since the
    batch was planned)."""
    if group == SINGLE:
        return QueueClient(servers, **access)
    with QueueClient(servers, **access) as client:
        address = group_primary(read_route(client, topic), group)
    return QueueClient(address, **access)
