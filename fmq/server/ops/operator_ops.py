"""The operator's requests: TOPICS, GROUPS and RESET_OFFSETS (``fmq topics``, ``fmq groups``,
``fmq stats``). They are declared like every other operation; their
answers are JSON text, like STATS. The index reads run in the reader threads, an offset reset
in the worker threads (it commits offsets through the consumer's path); group membership is
read on the event loop, which owns it."""

from __future__ import annotations

import json
import logging

from fmq.errors import GroupHasMembers
from fmq.message import check_name
from fmq.protocol import Op
from fmq.security import Operation, ResourceType
from fmq.server.context import RequestSession, ServerContext
from fmq.server.ops.operation import REFUSES, SERVES, Need, needs, on_cluster, operation

logger = logging.getLogger("fmq.server")


def _groups_needs(ctx: ServerContext, req: dict) -> list[Need]:
    # No group asks for every group: a view of the whole cluster.
    if req["group"] is None:
        return [(Operation.DESCRIBE, ResourceType.CLUSTER, "cluster")]
    return [(Operation.DESCRIBE, ResourceType.GROUP, req["group"])]


def _dump(obj: object) -> dict:
    return {"json": json.dumps(obj, sort_keys=True)}


@operation(Op.TOPICS, access=on_cluster(Operation.DESCRIBE), hosted=None, follower=SERVES)
async def _topics(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    inventory = ctx.broker.inventory
    topics = await ctx.read(inventory.topics)
    disk = await ctx.read(inventory.disk_usage)
    return _dump({"topics": topics, "disk": disk})


def group_members(ctx: ServerContext) -> dict[str, dict]:
    """Live members of every group: generation and each member's queues (event loop)."""
    return {name: {"generation": g["generation"],
                   "members": {mid: sorted(queues) for mid, queues in g["members"].items()}}
            for name, g in ctx.groups.describe().items()}


@operation(Op.GROUPS, access=needs(_groups_needs), hosted=None, follower=SERVES)
async def _groups(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    group = req["group"]
    if group is not None:
        check_name(group, "group", allow_none=False)
    # Membership belongs to the event loop: copied here, before the read in its thread.
    live = group_members(ctx)
    offsets = await ctx.read(ctx.broker.inventory.groups, group, ctx.groups.subscriptions())
    # Each queue's range: a cluster's tools count there what a group subscribed to the
    # topic in another broker group has left to read (fmq.coordination.route_lag).
    queues = await ctx.read(ctx.broker.inventory.queue_ranges)
    names = sorted({r["group"] for r in offsets} | set(live))
    out = []
    for name in names:
        if group is not None and name != group:
            continue
        members = live.get(name, {"generation": 0, "members": {}})
        owner = {q: mid for mid, queues in members["members"].items() for q in queues}
        rows = [{**r, "owner": owner.get(f"{r['topic']}/{r['queue_id']}")}
                for r in offsets if r["group"] == name]
        out.append({"group": name, "generation": members["generation"],
                    "members": members["members"], "offsets": rows})
    return _dump({"groups": out, "queues": queues})


@operation(Op.RESET_OFFSETS, access=on_cluster(Operation.ADMIN), hosted=None, follower=REFUSES)
async def _reset_offsets(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    group = check_name(req["group"], "group", allow_none=False)
    members = ctx.groups.member_count(group)
    if members and not req["force"]:
        raise GroupHasMembers(group, members)
    qid = req["queue_id"] if req["queue_id"] >= 0 else None
    value = req["value"] if req["value"] >= 0 else None
    # Without the mode field (an older client) the offsets move, as they always did.
    execute = req.get("mode") is None or req["mode"]["execute"]
    # A plan writes nothing, so it need not wait for followers.
    changes = await (ctx.write if execute else ctx.run)(
        ctx.broker.inventory.reset_offsets, group, req["topic"], qid, req["to"], value,
        execute)
    if not execute:
        return _dump({"changes": changes, "executed": False})
    for c in changes:
        # A queue the group never committed in has no old offset: "none", not "None".
        old = "none committed" if c["old"] is None else c["old"]
        logger.warning("operator at %s reset group %r offset of %s/%d: %s -> %d (to %s%s)",
                       session.peer, group, c["topic"], c["queue_id"], old, c["new"],
                       req["to"], " with --force" if members else "")
    return _dump({"changes": changes, "executed": True})
