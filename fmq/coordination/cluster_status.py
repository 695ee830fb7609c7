"""``fmq cluster status`` as data: every broker group (primary, epoch, open for writes,
whether its primary answered), every topic's route (groups, queues, permission, global
indices) and, per routed queue, the lag of each consumer group subscribed to the topic (it
committed in any queue of it, in any group: :mod:`fmq.coordination.route_lag`) as the primaries
report it (GROUPS). Built from etcd (``--coordinator``) or from a node's ROUTE answer
for every route (``--server``); the primaries are asked in parallel, each with a time-out.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fmq.coordination.cluster_admin import OffsetReader
from fmq.coordination.route_lag import GroupsAnswer, route_lag
from fmq.coordination.routes import ClusterRoutes
from fmq.errors import FMQError, InvalidArgument
from fmq.topic_route import BrokerGroup, RouteEntry, TopicRoute, route_answer


def view_from_routes(routes: ClusterRoutes) -> dict:
    """The cluster as etcd has it, in the layout ROUTE answers for topic ""."""
    snap = routes.snapshot()
    return {"cluster": routes.cluster, "revision": snap.revision,
            "routes": {t: route_answer(routes.cluster, r, snap.groups)
                       for t, r in snap.routes.items()},
            "groups": {name: {"primary": g.primary, "epoch": g.epoch,
                              "open_for_writes": g.open_for_writes}
                       for name, g in snap.groups.items()},
            "damaged": dict(snap.damaged)}


def parse_view(view: Mapping[str, Any]) -> tuple[dict[str, TopicRoute],
                                                 dict[str, BrokerGroup]]:
    """The routes and groups of a ROUTE answer for every route (docs/protocol.md, ROUTE)."""
    try:
        groups = {name: BrokerGroup(name, str(g.get("primary", "")), int(g.get("epoch", 0)),
                                    bool(g.get("open_for_writes", True)))
                  for name, g in view["groups"].items()}
        routes = {}
        for topic, r in view["routes"].items():
            entries = tuple(RouteEntry(e["group"], int(e["queues"]), e["permission"],
                                       int(e["base"])) for e in r["groups"])
            routes[topic] = TopicRoute(topic, entries,
                                       max((e.base + e.queues for e in entries), default=0),
                                       int(r.get("version", 0)))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidArgument(f"the server's answer for every route is not in ROUTE's "
                              f"layout ({exc!r}); is it an older FMQ?") from None
    return routes, groups


def _ask_all(groups: Mapping[str, BrokerGroup],
             read_offsets: OffsetReader) -> dict[str, GroupsAnswer | str]:
    """Per group with a primary: its GROUPS answer, or why it could not be read."""
    asked = {name: g for name, g in groups.items() if g.primary}
    if not asked:
        return {}

    def one(g: BrokerGroup) -> list[dict] | str:
        try:
            return read_offsets(g)
        except (FMQError, OSError) as exc:
            return str(exc) or type(exc).__name__

    with ThreadPoolExecutor(max_workers=min(8, len(asked))) as pool:
        futures = {name: pool.submit(one, g) for name, g in asked.items()}
        return {name: f.result() for name, f in futures.items()}


def cluster_status(view: Mapping[str, Any], read_offsets: OffsetReader) -> dict:
    """The status of the cluster ``view`` describes (ROUTE's layout for every route), the
    lag read from each group's primary with ``read_offsets``."""
    routes, groups = parse_view(view)
    for route in routes.values():  # a group a route names but the cluster lost
        for e in route.entries:
            groups.setdefault(e.group, BrokerGroup(e.group))
    answers = _ask_all(groups, read_offsets)
    group_rows = []
    for name, g in sorted(groups.items()):
        answer = answers.get(name, "no primary now")
        group_rows.append({"group": name, "primary": g.primary, "epoch": g.epoch,
                           "open_for_writes": g.open_for_writes,
                           "registered": name in view["groups"],
                           "reachable": isinstance(answer, GroupsAnswer),
                           "error": "" if isinstance(answer, GroupsAnswer) else answer})
    route_rows, lag_rows = [], []
    for topic, route in sorted(routes.items()):
        route_rows.append({"topic": topic, "version": route.version, "groups": [
            {"group": e.group, "queues": e.queues, "permission": e.permission,
             "base": e.base, "last_index": e.base + e.queues - 1} for e in route.entries]})
        lag_rows += route_lag(route, {name: a for name, a in answers.items()
                                      if isinstance(a, GroupsAnswer)})
    lag_rows.sort(key=lambda r: (r["topic"], r["global_index"], r["consumer_group"]))
    return {"cluster": view.get("cluster", ""), "revision": view.get("revision", 0),
            "groups": group_rows, "routes": route_rows, "lag": lag_rows,
            "damaged": dict(view.get("damaged", {}))}
