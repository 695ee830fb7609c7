"""Produce (key 0): record batches into queues through FMQ's own send path.

Each partition's records go to the batcher (:class:`fmq.server.ops.batcher.SendBatcher`) as one
request, stored all or none: placed with the sends of every connection in this event-loop
turn and answered once the group commit made them durable (and, in ``sync``
acknowledgement mode, once the followers hold them). acks=1 and acks=all both wait for
that; acks=0 gets no answer, as in Kafka. The answer's base offset is the first queue
offset the records got.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from fmq.errors import FMQError
from fmq.message import SendResult
from fmq.protocol import Op
from fmq.security import Operation
from fmq.server.cluster.fencing import fencing_refusal, follower_refusal
from fmq.server.kafka import access
from fmq.server.kafka.apis import kafka_api, on_topics
from fmq.server.kafka.error_codes import error_code
from fmq.server.kafka.mapping import MappingError
from fmq.server.kafka.produce_answer import produce_answer
from fmq.server.kafka.record_messages import plain_messages_of_records
from fmq.server.kafka.records import RecordError, decode_batches
from fmq.server.kafka.routed import local_queue, not_here
from fmq.server.kafka.session import KafkaSession
from fmq.server.kafka.txn_produce import answered_as_version, store_transactional

logger = logging.getLogger("fmq.server.kafka")


@kafka_api(0, "Produce", 3, 9, access=on_topics(Operation.PRODUCE),
           answer_writer=produce_answer)
async def produce(session: KafkaSession, request: Any, version: int) -> dict | None:
    transactional_id = request.transactional_id
    topics = []
    for topic in request.topic_data:
        denied = access.refusal(session, topic.name)
        if denied is not None:
            parts = [_partition_error(p.index, denied, "this user may not produce to the topic")
                     for p in topic.partition_data]
        else:
            parts = [_start(session, topic.name, p.index, p.records, transactional_id)
                     for p in topic.partition_data]
        topics.append((topic.name, parts))
    if request.acks == 0:
        for _, parts in topics:
            for part in parts:
                if type(part) is not dict:
                    asyncio.ensure_future(part).add_done_callback(_drop_result)
        return None
    if transactional_id is not None:  # the partitions' prepares share one fsync
        answers = [{"name": name, "partition_responses": await asyncio.gather(
                        *(_answered(part) for part in parts))}
                   for name, parts in topics]
        answered_as_version(answers, version)
    else:  # submitted above: every partition's sends are placed in this turn's batch
        answers = [{"name": name, "partition_responses": [
                        part if type(part) is dict else await part for part in parts]}
                   for name, parts in topics]
    return {"responses": answers, "throttle_time": 0}


async def _answered(part: dict | Awaitable[dict]) -> dict:
    return part if type(part) is dict else await part


def _drop_result(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.result()  # _stored answers errors itself; anything else is a bug worth a log


def _partition_error(index: int, code: ErrorCode, message: str) -> dict:
    return {"index": index, "error_code": code, "base_offset": -1, "log_append_time": None,
            "log_start_offset": -1, "record_errors": [], "error_message": message}


def _start(session: KafkaSession, topic: str, partition: int, records: bytes | None,
           transactional_id: str | None = None) -> dict | Awaitable[dict]:
    """Submit one partition's records for storing: its part of the answer when refused at
    once, else an awaitable of it (the sends are submitted to this turn's batch before it
    returns). A transaction's records are prepared, not stored visible
    (:mod:`fmq.server.kafka.txn_produce`)."""
    ctx = session.ctx
    broker = ctx.broker
    if broker.topics.get(topic) is None and not broker.config.auto_create_topics:
        return _partition_error(partition, ErrorCode.unknown_topic_or_partition,
                                f"topic {topic!r} does not exist and auto_create_topics is "
                                f"off; create it first")
    queue = local_queue(session, topic, partition)  # the partition, unless routed
    if queue is None:
        return _partition_error(partition, ErrorCode.not_leader_or_follower,
                                not_here(topic, partition))
    if not 0 <= queue < broker.topics.queue_count(topic):
        return _partition_error(partition, ErrorCode.unknown_topic_or_partition,
                                f"topic {topic!r} has {broker.topics.queue_count(topic)} "
                                f"partitions (queues); partition {partition} is not one of them")
    refusal = follower_refusal(ctx.replication, Op.SEND_BATCH)
    if refusal is not None:  # a follower's log changes only by what its primary ships
        return _partition_error(partition, error_code(refusal), str(refusal))
    try:
        if transactional_id is not None:
            batches = decode_batches(records or b"", ctx.config.max_frame_size)
            return store_transactional(session, transactional_id, topic, queue, batches)
        messages, largest = plain_messages_of_records(records or b"",
                                                      ctx.config.max_frame_size, topic, queue)
    except RecordError as exc:
        logger.info("kafka produce from %s to %s/%d refused: %s", session.peer, topic,
                    partition, exc)
        return _partition_error(partition, ErrorCode(exc.code), str(exc))
    except MappingError as exc:
        return _partition_error(partition, ErrorCode.invalid_record, str(exc))
    if not messages:
        return _partition_error(partition, ErrorCode.none, None)
    try:
        # The decoder's knowledge (one topic and queue, each message plain, the largest)
        # lets the engine check the partition once instead of message by message.
        broker.check_messages(messages, largest)
        stored = ctx.batcher.submit(messages, checked=True)
    except FMQError as exc:
        return _partition_error(partition, error_code(exc), str(exc))
    return _stored(ctx, partition, stored)


async def _stored(ctx: Any, partition: int, stored: asyncio.Future) -> dict:
    """A partition's part of the answer once its sends are durable (or refused)."""
    try:
        results: list[SendResult] = await stored
    except FMQError as exc:
        return _partition_error(partition, error_code(exc), str(exc))
    refusal = fencing_refusal(ctx.replication, Op.SEND_BATCH)
    if refusal is not None:  # stored, but this primary can no longer prove its lease
        return _partition_error(partition, error_code(refusal), str(refusal))
    answer = _partition_error(partition, ErrorCode.none, None)
    answer["base_offset"] = results[0].queue_offset
    return answer
