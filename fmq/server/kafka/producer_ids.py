"""InitProducerId (key 22) and Kafka's idempotent producers on FMQ's dedup window.

A Kafka producer with idempotence asks for a producer id and an epoch, then numbers the
records of each partition 0, 1, 2, ... (a batch carries its first number). Each record is
stored with FMQ's idempotence properties (docs/operations.md, *Idempotent producing*):
``%producer`` = ``kafka-ID-EPOCH-PARTITION`` (Kafka numbers per partition, FMQ per
producer id, and a new epoch starts again at 0) and ``%seq`` = its number. A resent batch
is then answered with the offsets the first one got, and stored once, through the same
window FMQ's own producers use.

Producer ids are random 62-bit numbers, so ids handed out before a restart are not handed
out again. A transactional id is the transaction coordinator's
(:mod:`fmq.server.kafka.txn_coordinator`): its producer id and epoch are durable and each
InitProducerId bumps the epoch, fencing the older producers of the id.
"""

from __future__ import annotations

import secrets
from typing import Any

from kio.schema.errors import ErrorCode

from fmq.message import PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY, Message
from fmq.security import Operation, ResourceType
from fmq.server.kafka import access
from fmq.server.kafka.apis import LOGGED_IN, kafka_api
from fmq.server.kafka.session import KafkaSession
from fmq.server.kafka.txn_produce import init_transactional

MAX_EPOCH = 32_767


@kafka_api(22, "InitProducerId", 0, 4, access=LOGGED_IN)
async def init_producer_id(session: KafkaSession, request: Any, version: int) -> dict:
    if request.transactional_id is not None:
        if not access.permits(session, Operation.TRANSACTION, ResourceType.PRODUCER_GROUP,
                              request.transactional_id):
            return {"throttle_time": 0, "producer_id": -1, "producer_epoch": -1,
                    "error_code": ErrorCode.transactional_id_authorization_failed}
        return await init_transactional(session, request)
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH:
        return {"throttle_time": 0, "error_code": 0, "producer_id": pid,
                "producer_epoch": epoch + 1}  # a bump: the same producer, numbering anew
    return {"throttle_time": 0, "error_code": 0, "producer_id": secrets.randbits(62),
            "producer_epoch": 0}


def number(messages: list[Message], producer_id: int, epoch: int, partition: int,
           base_sequence: int) -> None:
    """Give a batch's messages FMQ's idempotence properties (``messages`` are new, in
    record order)."""
    producer = f"kafka-{producer_id}-{epoch}-{partition}"
    for i, message in enumerate(messages):
        properties = message.properties if message.properties is not None else {}
        properties[PRODUCER_ID_PROPERTY] = producer
        properties[SEQUENCE_PROPERTY] = str(base_sequence + i)
        message.properties = properties
