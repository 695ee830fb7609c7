"""The transactional halves of InitProducerId and Produce: what they ask of the
:class:`~fmq.server.kafka.txn_coordinator.TxnCoordinator`, and their answers.

A transactional Produce's records are prepared, not visible: the answer's ``base_offset`` is
-1, since FMQ places a transaction's messages in their queue when it commits
(docs/kafka.md, *Exactly-once*).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fmq.errors import FMQError
from fmq.protocol import Op
from fmq.server.cluster.fencing import follower_refusal
from fmq.server.kafka.error_codes import error_code
from fmq.server.kafka.mapping import to_message
from fmq.server.kafka.records import TRANSACTIONAL, DecodedBatch
from fmq.server.kafka.session import KafkaSession
from fmq.server.kafka.txn_coordinator import TxnRefused, coordinator, for_version

#: Kafka's default transaction.timeout.ms, for a request that sends none.
DEFAULT_TIMEOUT_MS = 60_000


async def init_transactional(session: KafkaSession, request: Any) -> dict:
    """InitProducerId's answer for a transactional id: its producer id and new epoch."""
    refusal = follower_refusal(session.ctx.replication, Op.PREPARE)
    if refusal is not None:  # a follower's log changes only by what its primary ships
        return {"throttle_time": 0, "error_code": error_code(refusal), "producer_id": -1,
                "producer_epoch": -1}
    timeout = getattr(request, "transaction_timeout", None)
    timeout_ms = int(timeout.total_seconds() * 1000) if timeout is not None \
        else DEFAULT_TIMEOUT_MS
    try:
        state = await coordinator(session.ctx).init_producer(request.transactional_id,
                                                             timeout_ms)
    except (TxnRefused, FMQError) as exc:
        code = exc.code if isinstance(exc, TxnRefused) else error_code(exc)
        return {"throttle_time": 0, "error_code": code, "producer_id": -1,
                "producer_epoch": -1}
    return {"throttle_time": 0, "error_code": ErrorCode.none,
            "producer_id": state.producer_id, "producer_epoch": state.epoch}


async def store_transactional(session: KafkaSession, transactional_id: str, topic: str,
                              partition: int, batches: list[DecodedBatch]) -> dict:
    """Prepare one partition's records of a transactional Produce; its part of the answer."""
    answer = {"index": partition, "error_code": ErrorCode.none, "base_offset": -1,
              "log_append_time": None, "log_start_offset": -1, "record_errors": [],
              "error_message": None}
    data = [b for b in batches if not b.control]
    if not data:
        return answer
    first = data[0]
    if first.producer_id < 0 or not first.attributes & TRANSACTIONAL:
        answer.update(error_code=ErrorCode.invalid_record,
                      error_message="a transactional Produce needs transactional record "
                                    "batches with a producer id (InitProducerId first)")
        return answer
    messages = [to_message(topic, partition, r) for b in data for r in b.records]
    try:
        await coordinator(session.ctx).produce(
            transactional_id, first.producer_id, first.producer_epoch, topic, partition,
            first.base_sequence, messages)
    except TxnRefused as exc:
        answer.update(error_code=exc.code, error_message=str(exc))
    except FMQError as exc:
        answer.update(error_code=error_code(exc), error_message=str(exc))
    return answer


def answered_as_version(answers: list[dict], version: int) -> None:
    """A transactional Produce's answer as a request of ``version`` understands it (a
    fenced producer below v9 is told INVALID_PRODUCER_EPOCH)."""
    for topic in answers:
        for part in topic["partition_responses"]:
            part["error_code"] = for_version(part["error_code"], 0, version)
