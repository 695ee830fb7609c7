"""AddPartitionsToTxn (key 24), AddOffsetsToTxn (25), EndTxn (26) and TxnOffsetCommit (28):
a transactional producer's requests, answered by the
:class:`~fmq.server.kafka.txn_coordinator.TxnCoordinator` (docs/kafka.md, *Exactly-once*).

Followers refuse them as they refuse every Kafka write (NOT_LEADER_OR_FOLLOWER). A
transaction stays in one broker group, as FMQ's do: AddPartitionsToTxn naming a partition
another group hosts (a topic routed over several groups) is refused before anything is
stored, that partition with INVALID_REQUEST and the others with OPERATION_NOT_ATTEMPTED,
as Kafka answers the rest of a request one partition of which failed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from fmq.errors import FMQError
from fmq.protocol import Op
from fmq.security import Operation, ResourceType
from fmq.server.cluster.fencing import follower_refusal
from fmq.server.kafka import access
from fmq.server.kafka.apis import ON_TRANSACTIONAL_ID, kafka_api
from fmq.server.kafka.error_codes import error_code
from fmq.server.kafka.routed import local_queue
from fmq.server.kafka.session import KafkaSession
from fmq.server.kafka.txn_coordinator import TxnRefused, coordinator, for_version

logger = logging.getLogger("fmq.server.kafka")

async def _outcome(session: KafkaSession, transactional_id: str, step: Awaitable[None],
                   denied: ErrorCode | None = None) -> ErrorCode:
    denied = access.refusal(session, transactional_id) or denied
    refusal = follower_refusal(session.ctx.replication, Op.PREPARE)
    if denied is not None or refusal is not None:
        step.close()  # type: ignore[attr-defined] - a coroutine never awaited
        return denied if denied is not None else error_code(refusal)
    try:
        await step
    except TxnRefused as exc:
        return exc.code
    except FMQError as exc:  # the log refused a write (closing, fenced, full)
        return error_code(exc)
    return ErrorCode.none


@kafka_api(24, "AddPartitionsToTxn", 0, 3, access=ON_TRANSACTIONAL_ID)
async def add_partitions_to_txn(session: KafkaSession, request: Any, version: int) -> dict:
    transactional_id = request.v3_and_below_transactional_id
    topics = request.v3_and_below_topics
    foreign = {(t.name, p) for t in topics for p in t.partitions
               if local_queue(session, t.name, p) is None}
    step = coordinator(session.ctx).add_partitions(
        transactional_id, request.v3_and_below_producer_id,
        request.v3_and_below_producer_epoch)
    if foreign:
        code = await _outcome(session, transactional_id, step,
                              ErrorCode.operation_not_attempted)
        if code == ErrorCode.operation_not_attempted:  # not refused for another reason
            logger.warning(
                "kafka transaction %r from %s refused: partitions %s are hosted by another "
                "broker group, and a transaction stays in one group (produce to the "
                "partitions of one group per transactional id)", transactional_id,
                session.peer, ", ".join(f"{t}/{p}" for t, p in sorted(foreign)))
    else:
        code = await _outcome(session, transactional_id, step)
    code = for_version(code, 24, version)

    def partition_code(topic: str, partition: int) -> ErrorCode:
        if code == ErrorCode.operation_not_attempted and (topic, partition) in foreign:
            return ErrorCode.invalid_request
        return code

    return {"throttle_time": 0, "results_by_topic_v3_and_below": [
        {"name": t.name, "results_by_partition": [
            {"partition_index": p, "partition_error_code": partition_code(t.name, p)}
            for p in t.partitions]}
        for t in topics]}


@kafka_api(25, "AddOffsetsToTxn", 0, 3, access=ON_TRANSACTIONAL_ID)
async def add_offsets_to_txn(session: KafkaSession, request: Any, version: int) -> dict:
    code = await _outcome(session, request.transactional_id,
                          coordinator(session.ctx).add_partitions(
        request.transactional_id, request.producer_id, request.producer_epoch))
    return {"throttle_time": 0, "error_code": for_version(code, 25, version)}


@kafka_api(26, "EndTxn", 0, 3, access=ON_TRANSACTIONAL_ID)
async def end_txn(session: KafkaSession, request: Any, version: int) -> dict:
    code = await _outcome(session, request.transactional_id, coordinator(session.ctx).end(
        request.transactional_id, request.producer_id, request.producer_epoch,
        request.committed))
    return {"throttle_time": 0, "error_code": for_version(code, 26, version)}


@kafka_api(28, "TxnOffsetCommit", 0, 3, access=ON_TRANSACTIONAL_ID)
async def txn_offset_commit(session: KafkaSession, request: Any, version: int) -> dict:
    # A routed topic's partition base + q is this group's queue q; another group's
    # partition is refused as AddPartitionsToTxn refuses it (a transaction stays in one
    # broker group), never committed into this group's queue of the same number.
    offsets = [(t.name, local_queue(session, t.name, p.partition_index), p.committed_offset)
               for t in request.topics for p in t.partitions]
    foreign = {(t.name, p.partition_index) for t in request.topics for p in t.partitions
               if local_queue(session, t.name, p.partition_index) is None}
    # The offsets move the consumer group's: commit-offsets on it, as OffsetCommit needs.
    group_denied = (None if access.permits(session, Operation.COMMIT_OFFSETS,
                                           ResourceType.GROUP, request.group_id)
                    else ErrorCode.group_authorization_failed)
    if foreign and group_denied is None:
        group_denied = ErrorCode.operation_not_attempted
        logger.warning("kafka transaction %r from %s: offsets of %s refused: hosted by another "
                       "broker group, and a transaction stays in one group",
                       request.transactional_id, session.peer,
                       ", ".join(f"{t}/{p}" for t, p in sorted(foreign)))
    code = await _outcome(session, request.transactional_id,
                          coordinator(session.ctx).offset_commit(
        request.transactional_id, request.producer_id, request.producer_epoch,
        request.group_id, offsets), group_denied)
    code = for_version(code, 28, version)

    def partition_code(topic: str, partition: int) -> ErrorCode:
        if code == ErrorCode.operation_not_attempted and (topic, partition) in foreign:
            return ErrorCode.invalid_request
        return code

    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [
            {"partition_index": p.partition_index,
             "error_code": partition_code(t.name, p.partition_index)}
            for p in t.partitions]}
        for t in request.topics]}
