"""Routes over the wire: ROUTE, a topic's broker groups, queues and primaries
(docs/cluster.md; the answer's layout is docs/protocol.md's).

A node of a cluster answers from its copy of the cluster's routes
(:class:`~fmq.server.cluster.route_membership.RouteMembership`), so clients never talk to etcd. A
topic without a route gets one when ``auto_create_topics`` is on: created in etcd over
every group that takes writes now (never silently in one). A node outside a cluster, and
FMQ's own ``%`` topics everywhere (each group keeps its own; they are never routed), answer
a route of this node's one group, version 0, so a client treats one node, one group and a
cluster alike.
"""

from __future__ import annotations

import json

from fmq.coordination.routes import RouteSnapshot
from fmq.errors import CoordinatorUnavailable, RouteConflict, UnknownTopic
from fmq.message import check_topic, is_internal_topic
from fmq.protocol import Op
from fmq.security import Operation, ResourceType
from fmq.server.authz import denial
from fmq.server.cluster.route_membership import RouteMembership
from fmq.server.context import RequestSession, ServerContext
from fmq.server.ops.operation import SERVES, TOPIC, Need, needs, operation
from fmq.server.ops.security_ops import node_role
from fmq.topic_route import READ_WRITE, TopicRoute, check_routable_topic, route_answer


def single_group_route(ctx: ServerContext, topic: str) -> dict:
    """ROUTE's answer on a node outside a cluster: its own group, all the topic's queues
    (the broker's default count for a topic not created yet, as a first send would make
    it), and the group's primary as this node knows it ("" = ask this node)."""
    cfg = ctx.broker.topics.get(topic)
    queues = cfg.queues if cfg is not None else ctx.broker.config.queues_per_topic
    primary = node_role(ctx)["primary"]
    return {"cluster": "", "topic": topic, "version": 0,
            "groups": [{"group": ctx.config.group, "queues": queues,
                        "permission": READ_WRITE, "base": 0, "primary": primary,
                        "epoch": 0, "open_for_writes": True}]}


def snapshot_answer(cluster: str, snapshot: RouteSnapshot) -> dict:
    """ROUTE "": every route and group of the cluster as this node's copy has them."""
    return {"cluster": cluster, "revision": snapshot.revision,
            "routes": {t: route_answer(cluster, r, snapshot.groups)
                       for t, r in sorted(snapshot.routes.items())},
            "groups": {n: {"primary": g.primary, "epoch": g.epoch,
                           "open_for_writes": g.open_for_writes}
                       for n, g in sorted(snapshot.groups.items())}}


def created_route(ctx: ServerContext, membership: RouteMembership, topic: str,
                  queues: int) -> TopicRoute:
    """``topic``'s route, created in etcd over every group that takes writes now when it
    has none there either (blocking: a worker thread). The copy is re-read at once, so the
    answer carries the groups' primaries; a primary makes its entry its local topic before
    answering, so the client's first send finds the entry's queues here."""
    store = membership.store
    route = store.get(topic)
    if route is None:
        try:
            route = store.create(topic, queues)
        except RouteConflict:  # another node created it meanwhile, or no group has a primary
            route = store.get(topic)
            if route is None:
                raise
    try:
        membership.follower.sync_once()
    except CoordinatorUnavailable:
        pass  # the route stands; the copy catches up through the watch
    if ctx.replication is not None and ctx.replication.primary is None:
        membership.make_topics_now(ctx.broker, membership.made_here(ctx))
    return route


def _may_create(ctx: ServerContext, session: RequestSession, topic: str) -> None:
    """Creating a route is what a first send does: it needs ``produce`` on the topic (ROUTE
    itself needs only ``describe``, which a consumer has too)."""
    if session.principal is None:  # a server without users
        return
    denied = denial(ctx, session, Operation.PRODUCE, ResourceType.TOPIC, topic,
                    "ROUTE creating the topic's route, a first send's right")
    if denied is not None:
        raise denied


async def _cluster_route(ctx: ServerContext, session: RequestSession,
                         membership: RouteMembership, topic: str) -> dict:
    check_routable_topic(topic)
    snapshot = membership.snapshot
    route = snapshot.routes.get(topic)
    if route is None:
        broker_config = ctx.broker.config
        # A topic this group had before the cluster keeps every queue it has: its route
        # gives each group as many (a queue past the route's count is read by no routing
        # consumer). Routing it creates no topic: auto_create_topics does not apply.
        local = await ctx.read(ctx.broker.topics.get, topic)
        if local is None and not broker_config.auto_create_topics:
            membership.poke()  # created elsewhere lately? the next ask may find it
            raise UnknownTopic(topic)
        _may_create(ctx, session, topic)
        queues = max(broker_config.queues_per_topic, local.queues if local else 0)
        route = await ctx.write(created_route, ctx, membership, topic, queues)
        snapshot = membership.snapshot
        route = max(route, snapshot.routes.get(topic) or route, key=lambda r: r.version)
    return route_answer(membership.cluster, route, snapshot.groups)


async def _cluster_view(ctx: ServerContext, membership: RouteMembership) -> dict:
    """ROUTE "": the cluster's routes as etcd holds them now, or this node's copy when etcd
    cannot be reached. The copy follows etcd through a watch, so a route made elsewhere a
    moment ago may not be in it yet, and a view is asked for to look at the whole cluster (an
    operator, a key search): it reads etcd itself, and the copy catches up at once."""
    copy = membership.snapshot
    try:
        fresh = await ctx.read(membership.store.snapshot)
    except CoordinatorUnavailable:
        return snapshot_answer(membership.cluster, copy)
    if fresh.revision <= copy.revision:
        return snapshot_answer(membership.cluster, copy)
    membership.poke()
    return snapshot_answer(membership.cluster, fresh)


def _route_needs(ctx: ServerContext, req: dict) -> list[Need]:
    # "" asks for every route and group: a view of the whole cluster.
    if not req["topic"]:
        return [(Operation.DESCRIBE, ResourceType.CLUSTER, "cluster")]
    return [(Operation.DESCRIBE, TOPIC, req["topic"])]


@operation(Op.ROUTE, access=needs(_route_needs), hosted=None, follower=SERVES)
async def _route(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    topic = req["topic"]
    membership: RouteMembership | None = ctx.routes
    if not topic:
        answer = (await _cluster_view(ctx, membership) if membership is not None else
                  {"cluster": "", "revision": 0, "routes": {}, "groups": {}})
    else:
        check_topic(topic)
        if membership is None or is_internal_topic(topic):
            answer = await ctx.read(single_group_route, ctx, topic)
            if membership is not None:
                answer["cluster"] = membership.cluster
        else:
            answer = await _cluster_route(ctx, session, membership, topic)
    return {"json": json.dumps(answer, sort_keys=True)}
