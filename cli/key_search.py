"""Where ``fmq message find`` looks for a key: every broker group of the topic's route (a
key can sit in any of them: sent to a named queue, or before the route grew), each through
its own primary, with the user's own access (``consume`` on the topic, nothing more).

The route is read as a consumer reads it (:func:`fmq.client.routed_consumer.read_route`):
outside a cluster, for a user who may not read routes, and for FMQ's own topics (each
group's own) the server asked is the one place to look."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from fmq.cli.client_options import client_kwargs


class Found(NamedTuple):
    """A message found with its key, the broker group holding it ("" outside a cluster)
    and the first global queue index of that group's queues of the topic."""

    message: Any
    broker_group: str
    base: int


def segment_bases(client: Any) -> list[int] | None:
    """The server's segment base offsets, from its STATS; None when the user may not ask
    (STATS needs ``admin`` on the cluster: a lookup itself needs only ``consume``)."""
    from fmq.errors import AccessDenied
    from fmq.protocol import Op

    try:
        return json.loads(client.call(Op.STATS, {})["json"]).get("segment_bases", [])
    except AccessDenied:
        return None


def find_in_route(client: Any, topic: str, key: str, limit: int, since_ms: int | None
                  ) -> tuple[list[Found], dict[str, list[int] | None]]:
    """The messages of ``topic`` with ``key`` in every broker group of its route (oldest
    first per group), and each group's segment bases (None: not readable)."""
    from fmq.client import Client
    from fmq.client.routed_consumer import read_route
    from fmq.client.routing import RouteTable
    from fmq.errors import RouteConflict
    from fmq.message import is_internal_topic

    # FMQ's own topics (retries, dead letters) are each group's own, never routed.
    route = None if is_internal_topic(topic) else read_route(client, topic, RouteTable())
    if route is None or route.single:
        found = [Found(m, "", 0) for m in _sorted(client.query_key(topic, key, limit, since_ms))]
        return found, {"": segment_bases(client) if found else []}
    found, bases = [], {}
    for entry in route.route.entries:
        primary = route.groups[entry.group].primary if entry.group in route.groups else ""
        if not primary:
            raise RouteConflict(topic, f"broker group {entry.group} of its route has no "
                                       f"primary now, so its messages cannot be searched; "
                                       f"try again once it has one (`fmq cluster status`)")
        with Client(primary, retries=1, **client_kwargs()) as group_client:
            here = _sorted(group_client.query_key(topic, key, limit, since_ms))
            found += [Found(m, entry.group, entry.base) for m in here]
            bases[entry.group] = segment_bases(group_client) if here else []
    return found, bases


def _sorted(messages: list) -> list:
    return sorted(messages, key=lambda m: (m.store_time, m.offset))
