"""Scheduled delivery and retries on the wire: SEND_AT, NACK and DLQ_REDRIVE. They are declared
like every other operation and run in the worker threads (each
waits for the group commit of what it stores, and in ``sync`` acknowledgement mode for the
followers too). The timer service wakes the long polls of the
queues it delivers to."""

from __future__ import annotations

import logging

from fmq.engine.timers import check_deliver_at
from fmq.errors import InvalidArgument
from fmq.log.placement import now_ms
from fmq.message import check_count
from fmq.protocol import Op
from fmq.protocol.values import NOT_GIVEN
from fmq.security import Operation
from fmq.server.context import RequestSession, ServerContext
from fmq.server.ops.operation import (
    GROUP,
    ONE_QUEUE,
    REFUSES,
    SENDS_ONE,
    TOPIC,
    Need,
    needs,
    on_cluster,
    on_sent_topics,
    operation,
)

logger = logging.getLogger("fmq.server")


def _nack_needs(ctx: ServerContext, req: dict) -> list[Need]:
    return [(Operation.CONSUME, GROUP, req["group"]), (Operation.CONSUME, TOPIC, req["topic"])]


def deliver_at_of(deliver_at: int, delay_ms: int) -> int:
    """The due time a SEND_AT asks for: exactly one of its two fields is given."""
    if (deliver_at == NOT_GIVEN) == (delay_ms == NOT_GIVEN):
        raise InvalidArgument("SEND_AT takes exactly one of deliver_at and delay_ms; set the "
                              "other to -1")
    if delay_ms != NOT_GIVEN:
        if delay_ms < 0:
            raise InvalidArgument(f"delay_ms must be >= 0 (or -1 with deliver_at), got "
                                  f"{delay_ms}")
        return now_ms() + delay_ms
    return check_deliver_at(deliver_at)


@operation(Op.SEND_AT, access=on_sent_topics(Operation.PRODUCE), hosted=SENDS_ONE,
           follower=REFUSES)
async def _send_at(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    due = deliver_at_of(req["deliver_at"], req["delay_ms"])
    [result] = await ctx.write(ctx.broker.deliveries.schedule, [req["message"]], due)
    return {"offset": result.offset, "deliver_at": result.deliver_at}


@operation(Op.NACK, access=needs(_nack_needs), hosted=ONE_QUEUE, follower=REFUSES)
async def _nack(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    delay = None if req["delay_ms"] == NOT_GIVEN else req["delay_ms"]
    times, dead = await ctx.write(ctx.broker.deliveries.nack, req["group"], req["topic"],
                                  req["queue_id"], req["queue_offset"], delay)
    return {"reconsume_times": times, "dead_letter": dead}


@operation(Op.DLQ_REDRIVE, access=on_cluster(Operation.ADMIN), hosted=None, follower=REFUSES)
async def _dlq_redrive(ctx: ServerContext, session: RequestSession, req: dict) -> dict:
    check_count(req["max_messages"], "max_messages")
    moved = await ctx.write(ctx.broker.deliveries.redrive, req["group"], req["max_messages"])
    logger.info("operator at %s redrove %d dead letters of group %r", session.peer, moved,
                req["group"])
    return {"redriven": moved}
