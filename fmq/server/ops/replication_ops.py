"""The replication operations: a follower's fetch (REPL_FETCH), where an epoch ends
(EPOCH_END), a promotion by hand (PROMOTE) and the group's status (REPL_STATUS). The
protocol is in docs/replication.md."""

from __future__ import annotations

import json

from fmq.errors import InvalidArgument, NotPrimary, ReplicaDiverged, StalePrimary
from fmq.index.epochs import epoch_end
from fmq.protocol import Op
from fmq.replication.chunks import read_chunk
from fmq.security import Operation
from fmq.server.cluster.replica_role import RoleChange
from fmq.server.context import RequestSession, ServerContext
from fmq.server.ops.operation import SERVES, on_cluster, operation

#: A follower copies the whole log; followers do not log in yet (docs/security.md).
ADMIN = on_cluster(Operation.ADMIN)


@operation(Op.REPL_FETCH, access=ADMIN, hosted=None, follower=SERVES)
async def _repl_fetch(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    role = ctx.replication
    if role.primary is not None:  # no chains: a follower copies from the primary only
        raise NotPrimary(role.primary)
    start = req["from_offset"]
    check_follower_epoch(ctx, req["epoch"], start)
    # The fetch is the follower's acknowledgement: it holds everything below `start`.
    name = follower_name(req["follower"], session.peer)
    role.replicas.report(name, session.peer, start)
    role.note_report()
    # A follower that asks for the high watermark is answered as soon as it moved past
    # what it was told last: its consumers must not wait a whole long poll for it.
    asks = bool(req.get("ask") and req["ask"]["visible_end"])
    told = role.told.get(name, -1) if asks else None
    # Answer well within max_lag_ms, whatever the follower asked: an idle follower must
    # report often enough to stay in sync.
    timeout = 0.0 if ctx.stopping else min(ctx.wait_ms(req["wait_ms"]),
                                           role.replicas.max_lag_s / 3)
    await role.wait_flushed_past(start, timeout, told)
    replica = ctx.broker.replica
    chunk = await ctx.read(read_chunk, replica.log, start, req["max_bytes"])
    visible = None
    if asks:
        role.told[name] = role.visible_end()
        visible = {"visible_end": role.told[name]}
    return {"epoch": role.epoch, "segment_base": chunk.segment_base,
            "segment_size": chunk.segment_size, "data": chunk.data,
            "durable_end": replica.flushed_offset, "first_offset": replica.first_offset,
            "visible": visible}


#: Listening hosts that do not say which machine a follower is on.
_WILDCARDS = ("", "0.0.0.0", "::", "[::]")


def follower_name(name: str, peer: str) -> str:
    """A follower's name in the in-sync set: the address it listens on, with the host its
    connection comes from when it listens on every interface (two such followers on two
    machines must not count as one)."""
    host, _, port = name.rpartition(":")
    if host in _WILDCARDS:
        return f"{peer.rpartition(':')[0]}:{port}"
    return name


def check_follower_epoch(ctx: ServerContext, follower_epoch: int, start: int) -> None:
    """A follower in a newer term than this primary means this node is stale; one in an
    older term may fetch only up to where its epoch ends here (it cuts the rest first)."""
    role = ctx.replication
    if follower_epoch > role.epoch:
        raise StalePrimary(role.epoch, follower_epoch)
    if follower_epoch < role.epoch:
        _, end = epoch_end(role.history, follower_epoch, ctx.broker.replica.flushed_offset)
        if start > end:
            raise ReplicaDiverged(start, end)


@operation(Op.EPOCH_END, access=ADMIN, hosted=None, follower=SERVES)
async def _epoch_end(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    role = ctx.replication
    if role.primary is not None:
        raise NotPrimary(role.primary)
    found, end = epoch_end(role.history, req["epoch"], ctx.broker.replica.flushed_offset)
    return {"epoch": found, "end_offset": end, "current_epoch": role.epoch}


@operation(Op.PROMOTE, access=ADMIN, hosted=None, follower=SERVES)
async def _promote(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    role = ctx.replication
    if role.primary is None:
        raise InvalidArgument("this server is the primary already (fmq replica status)")
    if ctx.config.coordinator:
        raise InvalidArgument("this group elects its primary through etcd "
                              f"({ctx.config.coordinator}): stop the primary instead, and "
                              "the most up-to-date follower takes over")
    if role.change_role is None or ctx.stopping:
        raise InvalidArgument("this server is stopping; promote it once it runs again")
    epoch = max(role.epoch, role.follower.epoch if role.follower else 0) + 1
    role.change_role(RoleChange("", epoch=epoch, node=req["node"] or role.node))
    return {"json": json.dumps({"promoting": True, "epoch": epoch})}


@operation(Op.REPL_STATUS, access=on_cluster(Operation.DESCRIBE), hosted=None, follower=SERVES)
async def _repl_status(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    return {"json": json.dumps(ctx.replication.describe(), sort_keys=True)}
