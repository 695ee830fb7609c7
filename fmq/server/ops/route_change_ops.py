"""ROUTE_CHANGE: an administrator's route change (create, expand, drain, reopen,
remove-group) made through any node of a cluster, which writes it to etcd on the client's
behalf (docs/cluster.md) and answers the new route as ROUTE does. A node outside a cluster
has no routes to change.

The change runs in a worker thread: etcd and the primaries remove-group asks for their lag
must never hold up the event loop. This node reads its own group's lag from its own index
when it is that group's primary; another group's primary it asks over the network with the
credentials it follows a primary with (``follow_user``, ``follow_tls``, ...).
"""

from __future__ import annotations

import json

from fmq.coordination.cluster_admin import (
    ClusterAdmin,
    apply_change,
    decode_change,
    network_offsets,
)
from fmq.coordination.route_lag import GroupsAnswer
from fmq.coordination.routes import ClusterRoutes
from fmq.errors import ConfigError
from fmq.protocol import Op
from fmq.security import Operation, ResourceType
from fmq.server.cluster.replica_role import primary_access
from fmq.server.context import RequestSession, ServerContext
from fmq.server.ops.operation import SERVES, TOPIC, Need, needs, operation
from fmq.topic_route import BrokerGroup


def _admin(ctx: ServerContext) -> ClusterAdmin:
    config = ctx.config
    tls, _credentials = primary_access(config)
    remote = network_offsets({"tls": tls, "user": config.follow_user or None,
                              "password_file": config.follow_password_file or None})

    def read_offsets(broker_group: BrokerGroup) -> GroupsAnswer:
        role = ctx.replication  # its primary is None on the primary itself
        if broker_group.name == config.group and (role is None or role.primary is None):
            inventory = ctx.broker.inventory
            ranges = inventory.queue_ranges()
            return GroupsAnswer(inventory.groups(), {(q["topic"], q["queue_id"]):
                                                     (q["min_offset"], q["next_offset"])
                                                     for q in ranges})
        return remote(broker_group)

    return ClusterAdmin(ClusterRoutes(config.coordinator, config.cluster), read_offsets)


def _route_change_needs(ctx: ServerContext, req: dict) -> list[Need]:
    # The topic is inside the JSON; a request that names none can only be judged by an
    # administrator of the cluster (the handler then says what is wrong with it).
    try:
        topic = json.loads(req["json"]).get("topic")
    except (ValueError, AttributeError):
        topic = None
    if not isinstance(topic, str) or not topic:
        return [(Operation.ADMIN, ResourceType.CLUSTER, "cluster")]
    return [(Operation.ALTER, TOPIC, topic)]


def _change(ctx: ServerContext, text: str) -> dict:
    request = decode_change(text)
    admin = _admin(ctx)
    return admin.answer(apply_change(admin, request))


@operation(Op.ROUTE_CHANGE, access=needs(_route_change_needs), hosted=None, follower=SERVES)
async def _route_change(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    if not ctx.config.coordinator:
        raise ConfigError("this node is not part of a cluster, so it has no routes to change: "
                          "start the cluster's nodes with --coordinator etcd://HOST:PORT and "
                          "--cluster-name NAME (docs/cluster.md)")
    answer = await ctx.run(_change, ctx, req["json"])
    return {"json": json.dumps(answer, sort_keys=True)}
