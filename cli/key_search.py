"""Where ``fmq message find`` looks for a key: every broker group of the topic's route (a
key can sit in any of them: sent to a named queue, or before the route grew), each through
its own primary, with the user's own access (``consume`` on the topic, nothing more).

The routes come from the cluster's view (ROUTE "", which creates none), or, for a user who
may not read it, as a consumer reads a topic's route
(:func:`fmq.client.cluster.consumers.read_route`). Outside a cluster, for a topic the cluster
does not route, for a user who may not read routes at all, and for FMQ's own topics (each
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


class RouteReader:
    """Topics' routes for one search. The whole cluster's view (ROUTE "") is read once and
    creates nothing; a user who may not read it (it needs ``describe`` on the cluster) reads
    each topic's route as a consumer does."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._view: dict | None = None
        self._view_denied = False

    def route(self, topic: str) -> Any:
        """``topic``'s route (:class:`fmq.client.cluster.route_table.Route`); single outside a cluster
        and for a topic the cluster does not route."""
        from fmq.client.cluster.consumers import read_route
        from fmq.client.cluster.route_table import RouteTable, old_server_route, parse_route

        view = self._cluster_view()
        if view is None:
            return read_route(self.client, topic, RouteTable())
        answer = view.get("routes", {}).get(topic)
        return parse_route(json.dumps(answer)) if answer else old_server_route(topic)

    def _cluster_view(self) -> dict | None:
        from fmq.errors import AccessDenied
        from fmq.protocol import Op

        if self._view is None and not self._view_denied:
            try:
                self._view = json.loads(self.client.call(Op.ROUTE, {"topic": ""})["json"])
            except AccessDenied:
                self._view_denied = True
        return self._view


def find_in_route(client: Any, routes: RouteReader, topic: str, key: str, limit: int,
                  since_ms: int | None) -> tuple[list[Found], dict[str, list[int] | None]]:
    """The messages of ``topic`` with ``key`` in every broker group of its route (oldest
    first per group), and the segment bases (None: not readable) of each group where
    some were found."""
    from fmq.client import Client
    from fmq.errors import RouteConflict
    from fmq.message import is_internal_topic

    # FMQ's own topics (retries, dead letters) are each group's own, never routed.
    route = None if is_internal_topic(topic) else routes.route(topic)
    if route is None or route.single:
        found = [Found(m, "", 0) for m in _sorted(client.query_key(topic, key, limit, since_ms))]
        return found, ({"": segment_bases(client)} if found else {})
    found, bases = [], {}
    for entry in route.route.entries:
        known = route.broker_groups.get(entry.group)
        primary = known.primary if known is not None else ""
        if not primary:
            raise RouteConflict(topic, f"broker group {entry.group} of its route has no "
                                       f"primary now, so its messages cannot be searched; "
                                       f"try again once it has one (`fmq cluster status`)")
        with Client(primary, retries=1, **client_kwargs()) as group_client:
            here = _sorted(group_client.query_key(topic, key, limit, since_ms))
            found += [Found(m, entry.group, entry.base) for m in here]
            if here:
                bases[entry.group] = segment_bases(group_client)
    return found, bases


def _sorted(messages: list) -> list:
    return sorted(messages, key=lambda m: (m.store_time, m.offset))
