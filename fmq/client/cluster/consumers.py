"""A consumer of topics routed over several broker groups (docs/cluster.md, "Consumer groups
across broker groups"): one consumer per broker group hosting queues of its topics.

Each is a consumer of one broker group (today's consumer, on the group's own link to its
primary) joined with the same member id as every other. The group's primary assigns its
own queues (queue q to member ``(base + q) mod members``), so each queue has exactly one
owner, the one its hosting group chose; this consumer reads the union of their
assignments, pulls each queue from its own broker group and commits each offset there. A
broker group whose primary fails over is joined again by its consumer (whose heartbeat joins
with the same id); the others go on. Routes are read again every ``route_refresh_s``
seconds, at once after a NotHosted, and soon after a group's primary could not be reached;
a broker group new in a route gets a consumer, one gone from every route loses its
consumer.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import replace
from typing import Any

from fmq.errors import (
    AccessDenied,
    ConnectionLost,
    FMQError,
    NotHosted,
    PrimaryNotFound,
    UnknownTopic,
)
from fmq.message import StoredMessage
from fmq.protocol import Op

from ..acquire import OWN_LINK
from ..consumer_io import pull_wait_ms
from ..discovery import address_of
from .route_table import Route, RouteTable, knows_no_route, old_server_route, parse_route

logger = logging.getLogger("fmq.client")

Queue = tuple[str, int]
#: Makes the consumer of one broker group: (the primary's address, topics, member id).
MakeConsumer = Callable[[str, list[str], str], Any]
#: Seconds between two tries to make the consumer of a broker group whose primary did not
#: answer.
JOIN_RETRY_S = 1.0


def local_topic(topic: str) -> bool:
    """FMQ's own topics (retry, dead letters) are each broker group's own, never routed:
    every broker group's consumer reads them there."""
    return topic.startswith("%")


def read_route(client: Any, topic: str, table: RouteTable, retries: int | None = None
               ) -> Route:
    """``topic``'s route as ROUTE answers it, kept in ``table``: a user without access to
    routes, or a server without ROUTE, reads the servers given as one group; a retriable
    failure keeps the route held, if any."""
    try:
        answer = client.call(Op.ROUTE, {"topic": topic}, retries=retries)
        route = parse_route(answer["json"])
    except (AccessDenied, UnknownTopic):
        # No access to routes, or no route nor topic yet: the servers given are the group
        # (a consumer may subscribe before the first send).
        route = old_server_route(topic)
    except FMQError as exc:
        held = table.held(topic)
        if knows_no_route(exc):
            route = old_server_route(topic)
        elif held is not None and exc.retriable:
            logger.warning("could not read the route of %s (%s); keeping version %d",
                           topic, exc, held.version)
            route = held
        else:
            raise
    return table.store(topic, route)


def broker_group_consumers(owner: Any, route_refresh_s: float, make_consumer: MakeConsumer
                           ) -> BrokerGroupConsumers | None:
    """The consumers of ``owner`` (a Consumer), one per broker group, when a route of its
    topics spans broker groups (a cluster's route); None when every topic is read from the
    servers given."""
    routed = [t for t in owner.topics if not local_topic(t)]
    table = RouteTable(route_refresh_s)
    routes = [read_route(owner, t, table) for t in routed]
    if all(r.single for r in routes):
        return None
    return BrokerGroupConsumers(owner, table, routed, make_consumer)


class BrokerGroupConsumers:
    """The consumers of one Consumer, one per broker group of its topics' routes (keyed by
    the group's name). Used under the owner's lock (one thread at a time)."""

    def __init__(self, owner: Any, table: RouteTable, topics: list[str],
                 make_consumer: MakeConsumer) -> None:
        self.owner = owner
        self.table = table
        self.topics = topics
        #: FMQ's own topics the owner names (its retry topic is added by each consumer).
        self.local = [t for t in owner.topics if local_topic(t) and t != owner._retry_topic]
        self.member_id = uuid.uuid4().hex
        self.make_consumer = make_consumer
        self.consumers: dict[str, Any] = {}
        self._arranged: dict[str, tuple[int, tuple[str, ...]]] = {}
        self._missing_since: float | None = None
        try:
            self._arrange()
        except BaseException:
            self.close()  # refused in one broker group: no membership left in the others
            raise

    # ------------------------------------------------------------------ the consumers

    def _wanted(self) -> dict[str, list[str]]:
        """Each broker group of the routes held, with the topics it hosts queues of."""
        wanted: dict[str, list[str]] = {}
        for t in self.topics:
            route = self.table.held(t)
            if route is None or route.single:
                continue  # a single route among routed ones: not read (see docs/client.md)
            for entry in route.route.entries:
                wanted.setdefault(entry.group, []).append(t)
        return wanted

    def _address(self, broker_group: str) -> str:
        for t in self.topics:
            route = self.table.held(t)
            known = route.broker_groups.get(broker_group) if route is not None else None
            if known is not None and known.primary:
                return known.primary
        return ""

    def _arrange(self) -> None:
        """Consumers for the broker groups the routes name now: made, re-subscribed,
        pointed at a new primary, or closed. A group whose primary does not answer is tried
        again later."""
        wanted = self._wanted()
        missing = False
        for broker_group, topics in wanted.items():
            subscribed = [*topics, *self.local]
            address = self._address(broker_group)
            consumer = self.consumers.get(broker_group)
            if consumer is None:
                if not address:
                    missing = True
                    continue
                try:
                    consumer = self.make_consumer(address, subscribed, self.member_id)
                except FMQError as exc:
                    if not exc.retriable:
                        raise
                    logger.warning("consumer %s could not join group %s in broker group %s "
                                   "(%s); trying again", self.member_id, self.owner.group,
                                   broker_group, exc)
                    missing = True
                    continue
                consumer.on_pull_error = (lambda q, exc, g=broker_group:
                                          self._pull_failed(g, q, exc))
                self.consumers[broker_group] = consumer
                logger.info("consumer %s reads broker group %s (%s)", self.member_id,
                            broker_group, ", ".join(topics))
                continue
            retry = [consumer._retry_topic] if consumer._retry_topic else []
            consumer.topics = [*subscribed, *retry]  # its next heartbeat re-subscribes
            primary = address_of(address)
            if primary is not None:  # a fail-over named a new primary
                consumer.links.seed(OWN_LINK, primary)
        for broker_group in [g for g in self.consumers if g not in wanted]:
            logger.info("consumer %s leaves broker group %s: no route names it now",
                        self.member_id, broker_group)
            self.consumers.pop(broker_group).close()
        self._missing_since = time.monotonic() if missing else None
        self._arranged = self._state()

    def _state(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        """What the consumers were arranged by: each route's version and its broker groups'
        primaries (a fail-over moves a primary without a new version)."""
        return {t: (r.version, tuple(sorted(f"{g}={b.primary}"
                                            for g, b in r.broker_groups.items())))
                for t in self.topics if (r := self.table.held(t)) is not None}

    def _pull_failed(self, broker_group: str, q: Queue, exc: FMQError) -> None:
        if isinstance(exc, NotHosted):
            self.table.not_hosted(q[0])
        elif isinstance(exc, (ConnectionLost, PrimaryNotFound)):
            self.table.unreachable(broker_group, q[0])

    def _refresh(self) -> None:
        """Read the routes that are due, and rearrange the consumers when one changed or a
        broker group's consumer could not be made."""
        for t in self.topics:
            if self.table.current(t) is None:
                try:
                    read_route(self.owner, t, self.table, retries=1)
                except FMQError as exc:
                    if not exc.retriable:
                        raise
                    logger.warning("could not read the route of %s: %s", t, exc)
        retry_due = (self._missing_since is not None
                     and time.monotonic() - self._missing_since >= JOIN_RETRY_S)
        if retry_due or self._state() != self._arranged:
            self._arrange()

    # ------------------------------------------------------------------ reading

    def poll(self, timeout: float) -> list[StoredMessage]:
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            self._refresh()
            wait_ms = pull_wait_ms(deadline)
            out: list[StoredMessage] = []
            for broker_group, consumer in list(self.consumers.items()):
                try:
                    consumer._start_pulls(wait_ms)
                except FMQError as exc:  # this group's primary is away: the others go on
                    if not exc.retriable:
                        raise
                    logger.debug("broker group %s: %s", broker_group, exc)
                out.extend(replace(m, group=broker_group) for m in consumer._collect())
            if out:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            futures = [f for c in self.consumers.values() for f in c._pending()]
            if futures:
                wait(futures, timeout=min(remaining, 0.5), return_when=FIRST_COMPLETED)
            else:
                time.sleep(min(remaining, 0.1))

    def commit(self) -> None:
        """Commit each broker group's queues in that group. A group whose primary is away
        keeps its positions uncommitted (at-least-once: a later commit, or the next owner,
        reads them again) and the others are committed."""
        for broker_group, consumer in self.consumers.items():
            try:
                consumer._commit()
            except FMQError as exc:
                if not exc.retriable:
                    raise
                logger.warning("could not commit in broker group %s (%s); committing later",
                               broker_group, exc)

    def nack(self, message: StoredMessage, delay: float | None) -> int:
        """Fail ``message`` in the broker group that stores it."""
        return self._consumer_of(message).nack(message, delay)

    def _consumer_of(self, message: StoredMessage) -> Any:
        consumer = self.consumers.get(message.group)
        if consumer is None:
            raise NotHosted(message.topic, message.group or "?", message.queue_id,
                            self._arranged.get(message.topic, (0,))[0])
        return consumer

    # ------------------------------------------------------------------ assignment

    def group_assignment(self) -> list[tuple[str, str, int]]:
        """(broker group, topic, local queue id) of every queue this consumer reads now,
        its groups' retry topics included."""
        return sorted((g, t, q) for g, consumer in self.consumers.items()
                      for t, q in [*consumer.assignment, *consumer.retry_assignment])

    def assignment(self) -> list[Queue]:
        """(topic, global index) of the routed queues this consumer reads now."""
        out = []
        for broker_group, topic, q in self.group_assignment():
            route = self.table.held(topic)
            entry = route.route.entry(broker_group) if route is not None else None
            if entry is not None:
                out.append((topic, entry.base + q))
        return sorted(out)

    def retry_assignment(self) -> list[Queue]:
        """Queues of the consumer group's retry topics, in whichever broker group they are."""
        return sorted((t, q) for _g, t, q in self.group_assignment()
                      if t == self.owner._retry_topic)

    def generations(self) -> dict[str, int]:
        """Each broker group's generation of the consumer group, as its consumer there last
        saw it."""
        return {g: c.generation for g, c in self.consumers.items()}

    def close(self) -> None:
        """Leave the consumer group in every broker group."""
        for consumer in self.consumers.values():
            consumer.close()
        self.consumers.clear()
