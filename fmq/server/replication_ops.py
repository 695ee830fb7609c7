"""The replication operations: a follower's fetch (REPL_FETCH) and the group's status
(REPL_STATUS). The protocol is in docs/replication.md."""

from __future__ import annotations

import json

from fmq.errors import NotPrimary
from fmq.protocol import Op
from fmq.replication.chunks import read_chunk
from fmq.server.context import RequestSession, ServerContext
from fmq.server.handlers import handles


@handles(Op.REPL_FETCH)
async def _repl_fetch(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    role = ctx.replication
    if role.primary is not None:  # no chains: a follower copies from the primary only
        raise NotPrimary(role.primary)
    start = req["from_offset"]
    # The fetch is the follower's acknowledgement: it holds everything below `start`.
    role.replicas.report(follower_name(req["follower"], session.peer), session.peer, start)
    # Answer well within max_lag_ms, whatever the follower asked: an idle follower must
    # report often enough to stay in sync.
    timeout = 0.0 if ctx.stopping else min(ctx.wait_ms(req["wait_ms"]),
                                           role.replicas.max_lag_s / 3)
    await role.wait_flushed_past(start, timeout)
    chunk = await ctx.read(read_chunk, ctx.broker.log, start, req["max_bytes"])
    log = ctx.broker.log
    return {"epoch": 0, "segment_base": chunk.segment_base,
            "segment_size": chunk.segment_size, "data": chunk.data,
            "durable_end": log.flushed_offset, "first_offset": log.first_offset}


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


@handles(Op.REPL_STATUS)
async def _repl_status(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    return {"json": json.dumps(ctx.replication.describe(), sort_keys=True)}
