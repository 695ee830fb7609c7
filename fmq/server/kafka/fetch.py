"""Fetch (key 1): queue messages as record batches v2, with Kafka's long poll.

A fetch reads every partition it names in one reader-thread call; when the answer holds
less than ``min_bytes`` it waits, through the same pull wake-ups as FMQ's own PULL (no
thread held, woken only by a write to one of its queues), until data arrives, ``max_wait``
passes (capped by the server's ``max_wait_ms``), the connection closes or the server stops.
The high watermark is the queue's next offset and the log start offset its first readable
one: both what an FMQ consumer sees. A fetch offset past the high watermark but within what
the node stores (:func:`stored_end`) waits like one at the watermark, as Kafka's does.

A partition's batch is written from its records as the log stores them
(:meth:`~fmq.engine.reads.Reader.pull_stored`, then
:func:`~fmq.server.kafka.stored_batches.stored_batch`): no message is decoded on the way.
Where a record is damaged or was deleted by retention meanwhile, the partition is read
again as FMQ's own pull reads it, so the answer, the error and the damage reported are the
same as for FMQ's consumers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from fmq.engine.broker import Broker
from fmq.errors import BadRecord, IncompleteRecord
from fmq.security import Operation
from fmq.server.kafka import access
from fmq.server.kafka.apis import kafka_api, on_topics
from fmq.server.kafka.entities import ms
from fmq.server.kafka.fetch_answer import fetch_answer
from fmq.server.kafka.fetch_sessions import NO_SESSION, session_refusal
from fmq.server.kafka.leader_epochs import leadership
from fmq.server.kafka.record_messages import batch_of_messages
from fmq.server.kafka.routed import local_queue
from fmq.server.kafka.session import KafkaSession
from fmq.server.kafka.stored_batches import stored_batch

#: Messages one partition's answer holds at most (FMQ's own pulls stop there too).
MAX_RECORDS = 4096
#: How long a fetch from past the indexed end waits for the index before it is out of range
#: (a producer's acknowledged offset can be a moment ahead of the index).
INDEX_GRACE_S = 0.5


@dataclass
class PartitionRead:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    error: ErrorCode = ErrorCode.none
    records: bytes = b""
    #: This node's queue holding the partition (None: another broker group hosts it).
    queue: int | None = -1
    low: int = -1
    high: int = -1
    #: The user may not consume the topic: answered with this code, never read.
    denied: ErrorCode = ErrorCode.none
    #: The partition leader epoch its batch carries (the one Metadata gives it).
    leader_epoch: int = 0


@kafka_api(1, "Fetch", 4, 12, access=on_topics(Operation.CONSUME), answer_writer=fetch_answer)
async def fetch(session: KafkaSession, request: Any, version: int) -> dict:
    refused = session_refusal(request)
    if refused is not None:
        return refused
    ctx = session.ctx
    loop = ctx.loop
    reads = [PartitionRead(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
             for t in request.topics for p in t.partitions]
    _, epoch = leadership(session)
    for r in reads:
        r.denied = access.refusal(session, r.topic) or ErrorCode.none
        r.queue = local_queue(session, r.topic, r.partition)
        r.leader_epoch = epoch
    deadline = loop.time() + ctx.wait_ms(ms(request.max_wait))
    while True:
        events = [ctx.wakeups.events(r.topic, r.queue, session.id) for r in reads
                  if r.queue is not None]
        await ctx.read(_read_all, ctx.broker, reads, request.max_bytes)
        size = sum(len(r.records) for r in reads)
        remaining = deadline - loop.time()
        if (size >= request.min_bytes or remaining <= 0 or any(r.error for r in reads)
                or session.closing or ctx.stopping):
            break
        await _wait_any(events, remaining)
    return {"throttle_time": 0, "error_code": 0, "session_id": NO_SESSION,
            "responses": _answer(request, reads)}


async def _wait_any(events: list[tuple[asyncio.Event, asyncio.Event]], timeout: float) -> None:
    """Until data lands in one of the queues, the connection closes, or ``timeout``."""
    distinct = {id(e): e for pair in events for e in pair}.values()
    waits = [asyncio.ensure_future(e.wait()) for e in distinct]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def _answer(request: Any, reads: list[PartitionRead]) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for r in reads:
        by_topic.setdefault(r.topic, []).append({
            "partition_index": r.partition, "error_code": r.error, "high_watermark": r.high,
            "last_stable_offset": r.high, "log_start_offset": r.low,
            "aborted_transactions": None, "preferred_read_replica": -1,
            "records": r.records})
    return [{"topic": topic, "partitions": parts} for topic, parts in by_topic.items()]


def _read_all(broker: Broker, reads: list[PartitionRead], max_bytes: int) -> None:
    """Fill ``reads`` (in a reader thread): at least the first message of the first
    partition with data, then as much as ``max_bytes`` and each partition's limit allow."""
    used = 0
    for r in reads:
        r.records = b""
        if r.denied:
            r.error = r.denied
            continue
        _read_one(broker, r, max_bytes - used)
        used += len(r.records)


def _read_one(broker: Broker, r: PartitionRead, budget: int) -> None:
    if r.queue is None:
        r.error = ErrorCode.not_leader_or_follower
        return
    if broker.topics.get(r.topic) is None or not 0 <= r.queue < broker.topics.queue_count(r.topic):
        r.error = ErrorCode.unknown_topic_or_partition
        return
    r.low, r.high = broker.reads.queue_range(r.topic, r.queue)
    if r.offset > r.high and broker.wait_indexed(INDEX_GRACE_S):
        r.low, r.high = broker.reads.queue_range(r.topic, r.queue)
    if r.offset < r.low or (r.offset > r.high and r.offset > stored_end(broker, r)):
        r.error = ErrorCode.offset_out_of_range
        return
    r.error = ErrorCode.none
    if r.offset >= r.high or budget <= 0:
        return  # at or past the high watermark: nothing to read yet
    max_bytes = min(budget, r.max_bytes)
    pulled = broker.reads.pull_stored(r.topic, r.queue, r.offset, MAX_RECORDS, max_bytes)
    if not pulled.entries:
        return
    try:
        batch, count, body_bytes = stored_batch(r.topic, r.queue, pulled.entries,
                                                pulled.records, r.leader_epoch,
                                                broker.reads.max_record_size)
    except (BadRecord, IncompleteRecord):
        count = 0
    if count:
        broker.reads.count_out(r.topic, count, body_bytes)
        r.records = batch
        return
    # A damaged record, or all of them deleted by retention since the index was read: the
    # pull reads them as it does for FMQ's consumers (what precedes the damage, reported
    # once, or its error; the records after the deleted ones).
    messages = broker.reads.pull(r.topic, r.queue, r.offset, MAX_RECORDS, max_bytes)
    if messages:
        r.records = batch_of_messages(messages, r.leader_epoch)


def stored_end(broker: Broker, r: PartitionRead) -> int:
    """The queue's stored end (Kafka's log end offset): past the high watermark, what this
    node holds and its followers do not yet. Kafka's rule: a fetch between the two is
    answered empty (the consumer waits for the watermark), only one past the stored end
    is OFFSET_OUT_OF_RANGE. So a consumer that read up to the old primary's watermark is
    not reset by a new primary whose own watermark is a moment behind it."""
    return broker.reads.stored_range(r.topic, r.queue)[1]
