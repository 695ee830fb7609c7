"""CreatePartitions (key 37): a topic's partitions are its queues, so adding partitions is
``fmq topic alter --queues`` (queues only grow; the messages keep their queues, and keys
hash over the new count from then on, as in Kafka).

Refused, nothing changed: a count not above the topic's (INVALID_PARTITIONS, as Kafka), an
unknown topic, a topic routed over broker groups (its queues per group are fixed: ``fmq
topic expand`` adds a group's queues), a follower (NOT_LEADER_OR_FOLLOWER). Replica
assignments are ignored, as at CreateTopics.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fmq.engine.broker import Broker
from fmq.errors import FMQError, UnknownTopic
from fmq.protocol import Op
from fmq.security import Operation
from fmq.server.kafka import access
from fmq.server.kafka.apis import kafka_api, on_topics
from fmq.server.kafka.controller import controller_refusal
from fmq.server.kafka.error_codes import error_code
from fmq.server.kafka.session import KafkaSession
from fmq.topic_config import MAX_QUEUES


class PartitionsRefused(ValueError):
    """A partition count FMQ does not take (INVALID_PARTITIONS)."""


@kafka_api(37, "CreatePartitions", 0, 3, access=on_topics(Operation.ALTER))
async def create_partitions(session: KafkaSession, request: Any, version: int) -> dict:
    results = []
    for topic in request.topics:
        code, message = await _grow(session, topic.name, topic.count, request.validate_only)
        results.append({"name": topic.name, "error_code": code, "error_message": message})
    return {"throttle_time": 0, "results": results}


async def _grow(session: KafkaSession, name: str, count: int, validate_only: bool
                ) -> tuple[ErrorCode, str | None]:
    ctx = session.ctx
    denied = access.refusal(session, name)
    if denied is not None:
        return denied, "this user may not alter the topic (FMQ's alter)"
    refused = controller_refusal(session, Op.TOPIC_ALTER)
    if refused is not None:
        return refused
    try:
        if ctx.routes is not None and name in ctx.routes.snapshot.routes:
            return (ErrorCode.invalid_request,
                    f"topic {name!r} is routed over broker groups, whose queue counts are "
                    f"fixed; add a group's queues with `fmq topic expand`")
        await ctx.read(_check, ctx.broker, name, count)
        if not validate_only:
            await ctx.write(ctx.broker.topics.alter, name, count)
    except PartitionsRefused as exc:
        return ErrorCode.invalid_partitions, str(exc)
    except FMQError as exc:
        return error_code(exc), str(exc)
    return ErrorCode.none, None


def _check(broker: Broker, name: str, count: int) -> None:
    cfg = broker.topics.get(name)
    if cfg is None:
        raise UnknownTopic(name)
    if count <= cfg.queues:
        raise PartitionsRefused(f"topic {name!r} has {cfg.queues} partitions (queues) and "
                                f"they only grow; ask for more than {cfg.queues}")
    if count > MAX_QUEUES:
        raise PartitionsRefused(f"a topic has at most {MAX_QUEUES} partitions (queues), "
                                f"not {count}")
