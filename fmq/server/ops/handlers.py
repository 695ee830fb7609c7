"""What the client's operations do: decoded request fields in, response fields out.

Each handler is declared once with its facts (``@operation``, :mod:`fmq.server.ops.operation`):
it is called with the server's :class:`~fmq.server.context.ServerContext`, the session the
request came on and the decoded request, and returns an awaitable of the response fields.
Every blocking broker call runs in a thread: writes in the worker threads (``ctx.write``,
which in ``sync`` acknowledgement mode also waits for the followers; ``ctx.run``), reads in
the reader threads (``ctx.read``); sends go through the batcher's pipeline (SEND and
SEND_BATCH without a task of their own: the batcher's future ends with the answer), and so
do PREPARE and COMMIT (:mod:`fmq.server.ops.tx_ops`); pull and feedback long polls wait
without holding a thread for long. The wire format of each is in
:mod:`fmq.protocol.schema`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fmq.engine.broker import Broker
from fmq.errors import InvalidArgument
from fmq.message import (
    PackedResults,
    SendResult,
    StoredMessage,
    check_count,
    check_name,
    parse_tag_expression,
)
from fmq.protocol import PROTOCOL_VERSION, Op
from fmq.protocol.types import Packed
from fmq.protocol.values import (
    results_to_wire,
    send_answer,
    state_answer,
    stored_to_wire,
    tx_id_answer,
    uncertain_to_wire,
)
from fmq.security import Operation
from fmq.server.context import RequestSession, ServerContext
from fmq.server.net.replies import QUERY_REPLY_BASE, fit
from fmq.server.net.reply_account import ReplyRoom
from fmq.server.ops import tx_ops
from fmq.server.ops.group_protocol_gate import gate_of
from fmq.server.ops.operation import (
    GROUP,
    HANDSHAKE,
    ONE_QUEUE,
    PGROUP,
    REFUSES,
    SENDS_MANY,
    SENDS_ONE,
    SERVES,
    TOPIC,
    Need,
    needs,
    on_cluster,
    on_group,
    on_producer_group,
    on_sent_topics,
    on_topic,
    operation,
)
from fmq.server.ops.pull_reads import PullRead, pull_now, pull_on_loop
from fmq.server.ops.wakeups import PullEvents
from fmq.tx.state import TxState
from fmq.version import __version__

logger = logging.getLogger("fmq.server")

PRODUCE, CONSUME, DESCRIBE = Operation.PRODUCE, Operation.CONSUME, Operation.DESCRIBE
#: The operator's requests: admin on the cluster.
ADMIN = on_cluster(Operation.ADMIN)
#: A transaction's requests: the producer group they name.
TRANSACTION = on_producer_group(Operation.TRANSACTION)


def _prepare_needs(ctx: ServerContext, req: dict) -> list[Need]:
    return [(Operation.TRANSACTION, PGROUP, req["producer_group"]),
            *((PRODUCE, TOPIC, t) for t in {m.topic for m in req["messages"]})]


def _member_needs(ctx: ServerContext, req: dict) -> list[Need]:
    return [(CONSUME, GROUP, req["group"]), *((CONSUME, TOPIC, t) for t in set(req["topics"]))]


#: A consumer group member's requests: the group and every topic it subscribes to.
MEMBER = needs(_member_needs)


def _tx_state(value: str, allowed: tuple[TxState, ...]) -> TxState:
    try:
        state = TxState(value)
    except ValueError:
        state = None
    if state not in allowed:
        raise InvalidArgument(f"transaction state must be one of "
                              f"{', '.join(s.value for s in allowed)}, not {value!r}")
    return state


@operation(Op.PING, access=HANDSHAKE, hosted=None, follower=SERVES)
async def _ping(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    cfg = ctx.config
    return {"server_version": __version__, "protocol_version": PROTOCOL_VERSION,
            "queues_per_topic": ctx.broker.config.queues_per_topic,
            "max_frame_size": cfg.max_frame_size, "max_in_flight": cfg.max_in_flight}


@operation(Op.SEND, access=on_sent_topics(PRODUCE), hosted=SENDS_ONE, follower=REFUSES)
def _send(ctx: ServerContext, session: RequestSession, req: dict) -> asyncio.Future[dict]:
    # The hot path: no task; the batcher's future is the request, and it ends with the answer.
    return ctx.batcher.submit([req["message"]], send_reply, session.principal)


def send_reply(results: Sequence[SendResult]) -> Packed | dict:
    """A SEND's answer from its placed results (the session's short step for a plain SEND
    answers with it too)."""
    # Placement's packed result is the answer as it is; a list holds the one result.
    return send_answer(results if type(results) is PackedResults else results[0])


@operation(Op.SEND_BATCH, access=on_sent_topics(PRODUCE), hosted=SENDS_MANY, follower=REFUSES)
def _send_batch(ctx: ServerContext, session: RequestSession, req: dict
                ) -> Awaitable[dict]:
    msgs = req["messages"]
    if not msgs:
        return _answered({"results": []})
    return ctx.batcher.submit(msgs, send_batch_reply, session.principal)


def send_batch_reply(results: Sequence[SendResult]) -> dict:
    """A SEND_BATCH's answer from its placed results (the session's short step too)."""
    return {"results": results_to_wire(results)}


async def _answered(answer: dict) -> dict:
    return answer


@operation(Op.PREPARE, access=needs(_prepare_needs), hosted=SENDS_MANY, follower=REFUSES)
def _prepare(ctx: ServerContext, session: RequestSession, req: dict) -> Awaitable[dict]:
    msgs = req["messages"]
    # The answers are packed at once (no field dict through the codec): half of a
    # transaction's answers are these two.
    return tx_ops.prepare(ctx, msgs, req["producer_group"], req["tx_id"], tx_id_answer)


@operation(Op.COMMIT, access=TRANSACTION, hosted=None, follower=REFUSES)
def _commit(ctx: ServerContext, session: RequestSession, req: dict) -> Awaitable[dict]:
    return tx_ops.commit(ctx, req["producer_group"], req["tx_id"], state_answer)


@operation(Op.ROLLBACK, access=TRANSACTION, hosted=None, follower=REFUSES)
async def _rollback(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    state = await ctx.write(ctx.broker.transactions.rollback, req["tx_id"], req["producer_group"])
    return {"state": state.value}


#: A feedback long poll holds a thread for at most this long at a time, so a shutdown never
#: waits long for one (the interpreter joins pool threads at exit).
POLL_SLICE_S = 0.25


@operation(Op.POLL_UNCERTAIN, access=TRANSACTION, hosted=None, follower=REFUSES)
async def _poll_uncertain(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    loop = ctx.loop
    deadline = loop.time() + ctx.wait_ms(req["wait_ms"])
    args = (req["producer_group"], req["max_items"], req["lease_ms"])
    session.leases_taken = True  # its leases are returned when it closes
    while True:
        remaining = deadline - loop.time()
        if ctx.stopping or session.closing:
            remaining = 0.0
        slice_ms = int(max(0.0, min(remaining, POLL_SLICE_S)) * 1000)
        poll = loop.run_in_executor(ctx.pollers, ctx.broker.transactions.poll_uncertain, *args,
                                    slice_ms, session)
        # A shutdown answers a long poll (empty) at once. Anything the thread still picks is
        # leased but not delivered; the lease runs out and it is offered again later.
        stopped = asyncio.ensure_future(ctx.stop_requested.wait())
        await asyncio.wait([poll, stopped], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not poll.done():
            poll.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieve it
            return {"transactions": []}
        txs = poll.result()
        if txs and session.lost:
            # Leased after the connection's close returned its leases: nobody will answer.
            await ctx.run(ctx.broker.transactions.release_feedback_leases, session)
        if txs or deadline - loop.time() <= 0 or ctx.stopping or session.closing:
            break
    return {"transactions": [uncertain_to_wire(t) for t in txs]}


@operation(Op.ANSWER_UNCERTAIN, access=TRANSACTION, hosted=None, follower=REFUSES)
async def _answer_uncertain(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    state = _tx_state(req["state"], (TxState.COMMIT, TxState.ROLLBACK, TxState.UNKNOWN))
    group = req["producer_group"]
    if state == TxState.COMMIT:
        final = await tx_ops.commit(ctx, group, req["tx_id"])
    else:
        final = await ctx.write(ctx.broker.transactions.answer_uncertain, req["tx_id"], state,
                                session, group)
    return {"state": final.value}


def _reply_room(ctx: ServerContext, session: RequestSession, need: int = 0) -> ReplyRoom:
    """This request's answer in the reply budget, reserved before anything is read: up to
    max_reply_size, at least enough for one message (``need``: exactly that much)."""
    if need:
        return ReplyRoom(session, need, need)
    cfg = ctx.config
    return ReplyRoom(session, cfg.max_reply_size, min(cfg.max_reply_size, ctx.largest_reply))


@operation(Op.PULL, access=on_topic(CONSUME), hosted=ONE_QUEUE, follower=SERVES)
async def _pull(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    answer = await _long_poll_pull(ctx, session, req, None)
    del answer["resume_offset"]
    return answer


@operation(Op.PULL_TAGGED, access=on_topic(CONSUME), hosted=ONE_QUEUE, follower=SERVES)
async def _pull_tagged(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    parse_tag_expression(req["tags"])  # a bad expression fails at once, not after a wait
    return await _long_poll_pull(ctx, session, req, req["tags"])


async def pull_after_wait(ctx: ServerContext, session: RequestSession, req: dict,
                          events: PullEvents | None, deadline: float) -> dict:
    """A PULL whose first read found nothing (the session's short step read it,
    :func:`fmq.server.ops.plain_pull.answer_pull_now`), from its wait on: the wait on
    ``events`` (taken before that read) until ``deadline``, then :func:`_pull`'s reads;
    ``req["offset"]``: where that read says to go on. ``events`` None: the step waited
    already and was woken, and left its next read to this way (from that read on)."""
    answer = await _long_poll_pull(ctx, session, req, None, (events, deadline))
    del answer["resume_offset"]
    return answer


async def _long_poll_pull(ctx: ServerContext, session: RequestSession, req: dict,
                          tags: str | None,
                          waiting: tuple[PullEvents | None, float] | None = None) -> dict:
    """``waiting``: the first read was made and found nothing (:func:`pull_after_wait`):
    its events and deadline; the pull waits first."""
    loop = ctx.loop
    topic, queue_id = req["topic"], req["queue_id"]
    check_count(req["max_messages"], "max_messages")
    offset, max_messages = req["offset"], min(req["max_messages"], 4096)
    need = 0
    if waiting is None:
        deadline = loop.time() + ctx.wait_ms(req["wait_ms"])
    else:
        events, deadline = waiting
        if events is not None:
            await ctx.wait_for_data(events, deadline - loop.time())
    while True:
        events = ctx.wakeups.events(topic, queue_id, session.id)
        async with _reply_room(ctx, session, need) as room:
            ctx.counters.pull_reads += 1
            keep = ctx.shared_queues.note(topic, queue_id, session.id, loop.time())
            read = PullRead(ctx.broker, ctx.encoded, keep, topic, queue_id, offset,
                            max_messages, tags, room.granted)
            pulled = pull_on_loop(ctx, read, deadline > loop.time())
            if pulled is None:
                pulled = await ctx.read(pull_now, *read)
            items, count, lo, hi, size, resume = pulled
            if size > room.granted:
                # One message larger than the part of the budget we got (only when
                # max_reply_size is below the largest message): read again with room for it.
                need = size
                continue
            remaining = deadline - loop.time()
            if count or remaining <= 0 or ctx.stopping or session.closing:
                room.keep(size)  # held until the answer is written
                break
            offset = resume  # a filtered pull goes on past what it skipped
        # A long poll holds no reply budget while it waits. Only a write to this queue, the
        # deadline, a closing connection or a shutdown ends the wait: an idle long poll
        # costs no thread and no reads meanwhile.
        await ctx.wait_for_data(events, remaining)
    return {"messages": items, "min_offset": lo, "next_offset": hi, "resume_offset": resume}


@operation(Op.COMMIT_OFFSET, access=on_group(Operation.COMMIT_OFFSETS), hosted=ONE_QUEUE,
           follower=REFUSES)
async def _commit_offset(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    # Progress of a group, not data: it wakes no pull.
    await ctx.write(ctx.broker.offsets.commit, req["group"],
                    [(req["topic"], req["queue_id"], req["next_offset"])])
    return {}


@operation(Op.FETCH_OFFSET, access=on_group(CONSUME), hosted=ONE_QUEUE, follower=SERVES)
async def _fetch_offset(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    off = await ctx.read(ctx.broker.reads.committed_offset, req["group"], req["topic"],
                         req["queue_id"])
    return {"offset": -1 if off is None else off}


def _assignment(pairs: list[tuple[str, int]]) -> list[dict]:
    return [{"topic": t, "queue_id": q} for t, q in pairs]


@operation(Op.GROUP_JOIN, access=MEMBER, hosted=None, follower=SERVES)
async def _group_join(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    member, gen, assigned = await gate_of(ctx).join(req["group"], req["member_id"],
                                                    req["topics"], session)
    logger.info("group %r: member %r joined from %s (generation %d, %d queues)",
                req["group"], member, session.peer, gen, len(assigned))
    cfg = ctx.config
    return {"member_id": member, "generation": gen, "assignment": _assignment(assigned),
            "queues_per_topic": ctx.broker.config.queues_per_topic,
            "heartbeat_interval_ms": cfg.group_heartbeat_interval_ms,
            "session_timeout_ms": cfg.group_session_timeout_ms}


@operation(Op.GROUP_HEARTBEAT, access=MEMBER, hosted=None, follower=SERVES)
async def _group_heartbeat(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    gen, assigned = await gate_of(ctx).renew(req["group"], req["member_id"], req["topics"],
                                             session)
    return {"generation": gen, "assignment": _assignment(assigned)}


@operation(Op.GROUP_SYNC, access=MEMBER, hosted=None, follower=SERVES)
async def _group_sync(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    gen, assigned = await gate_of(ctx).renew(req["group"], req["member_id"], req["topics"],
                                             session, applied=req["generation"])
    return {"generation": gen, "assignment": _assignment(assigned)}


@operation(Op.GROUP_LEAVE, access=on_group(CONSUME), hosted=None, follower=SERVES)
async def _group_leave(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    if ctx.groups.leave(req["group"], req["member_id"]):
        logger.info("group %r: member %r left", req["group"], req["member_id"])
    return {}


@operation(Op.GROUP_MEMBERS, access=on_group(DESCRIBE), hosted=None, follower=REFUSES)
async def _group_members(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    # Asked by another broker group before it lets the other protocol start the group
    # (fmq.server.ops.group_protocol_gate): joins being admitted count as members.
    group = check_name(req["group"], "group", allow_none=False)
    return {"fmq_members": gate_of(ctx).members(group),
            "kafka_members": ctx.groups.foreign_members(group)}


def _indexed(broker: Broker, fn: Callable[..., Any], *args: Any) -> Any:
    """Queries see every message acknowledged before they arrived: an acknowledged message
    is flushed at once but indexed a moment later, so wait for the index first."""
    broker.wait_indexed(1.0)
    return fn(*args)


def _query_now(broker: Broker, topic: str, key: str, limit: int, max_bytes: int
               ) -> tuple[list[StoredMessage], int]:
    budget = max_bytes - QUERY_REPLY_BASE
    msgs, size = fit(broker.reads.messages_by_key(topic, key, limit, budget), budget)
    return msgs, QUERY_REPLY_BASE + size


@operation(Op.QUERY_KEY, access=on_topic(CONSUME), hosted=None, follower=SERVES)
async def _query_key(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    check_count(req["limit"], "limit")
    args = (req["topic"], req["key"], min(req["limit"], 4096))
    need = 0
    while True:
        async with _reply_room(ctx, session, need) as room:
            msgs, size = await ctx.read(_indexed, ctx.broker, _query_now, ctx.broker, *args,
                                        room.granted)
            if size <= room.granted:
                room.keep(size)  # held until the answer is written
                break
        need = size  # one message larger than what we got: read again with room for it
    return {"messages": [stored_to_wire(m) for m in msgs]}


@operation(Op.OFFSET_FOR_TIME, access=on_topic(DESCRIBE), hosted=ONE_QUEUE, follower=SERVES)
async def _offset_for_time(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    off = await ctx.read(_indexed, ctx.broker, ctx.broker.reads.offset_for_time, req["topic"],
                         req["queue_id"], req["timestamp_ms"])
    return {"offset": off}


@operation(Op.QUEUE_RANGE, access=on_topic(DESCRIBE), hosted=ONE_QUEUE, follower=SERVES)
async def _queue_range(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    lo, hi = await ctx.read(_indexed, ctx.broker, ctx.broker.reads.queue_range, req["topic"],
                            req["queue_id"])
    return {"min_offset": lo, "next_offset": hi}


@operation(Op.STATS, access=ADMIN, hosted=None, follower=SERVES)
async def _stats(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    stats = await ctx.run(ctx.broker.stats)
    stats["delivery"] = await ctx.read(ctx.broker.deliveries.stats)  # timers, retries, DLQs
    stats["server"] = ctx.hooks.stats()
    # The server process's own CPU time, so `fmq bench` gets CPU per message without /proc.
    times = os.times()
    stats["pid"], stats["process_cpu_s"] = os.getpid(), times.user + times.system
    return {"json": json.dumps(stats, sort_keys=True, default=str)}


@operation(Op.LIST_TX, access=ADMIN, hosted=None, follower=SERVES)
async def _list_tx(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    txs = await ctx.run(ctx.broker.transactions.open_transactions)
    return {"transactions": [{k: t[k] for k in ("tx_id", "producer_group", "state", "age_ms",
                                                "checks", "messages", "prepare_offset")}
                             for t in txs]}


@operation(Op.RESOLVE_TX, access=ADMIN, hosted=None, follower=REFUSES)
async def _resolve_tx(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    decision = _tx_state(req["decision"], (TxState.COMMIT, TxState.ROLLBACK))
    group = req["producer_group"]
    if decision == TxState.COMMIT:
        state = await tx_ops.commit(ctx, group, req["tx_id"])
    else:
        state = await ctx.write(ctx.broker.transactions.rollback, req["tx_id"], group)
    logger.info("operator at %s resolved transaction %r of group %r: %s", session.peer,
                req["tx_id"], group, state.value)
    return {"state": state.value}
