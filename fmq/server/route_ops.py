"""Routes over the wire: ROUTE, a topic's broker groups, queues and primaries
(docs/cluster.md).

A node outside a cluster answers ROUTE with a route of its one group, version 0, so a client
treats one node, one group and a cluster alike.
"""

from __future__ import annotations

import json

from fmq.protocol import Op
from fmq.server.authn import node_role
from fmq.server.context import RequestSession, ServerContext
from fmq.server.handlers import handles

#: The permission of a route entry that takes writes; "ro" takes none (a drained group).
READ_WRITE = "rw"


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


@handles(Op.ROUTE)
async def _route(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    topic = req["topic"]
    if not topic:
        return {"json": json.dumps({"cluster": "", "revision": 0, "routes": {},
                                    "groups": {}}, sort_keys=True)}
    answer = await ctx.read(single_group_route, ctx, topic)
    return {"json": json.dumps(answer, sort_keys=True)}

