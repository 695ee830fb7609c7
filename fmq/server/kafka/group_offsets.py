"""FindCoordinator (key 10), OffsetCommit (key 8) and OffsetFetch (key 9): a Kafka group's
committed offsets are the FMQ consumer group's, one per queue.

This server is every group's coordinator. An offset committed by a Kafka consumer is the
next offset it will read, as FMQ's own commit is: a Kafka consumer and an FMQ consumer of
the same group name continue from each other's commits. Group membership (JoinGroup,
SyncGroup, Heartbeat) is not served yet, so the commits come from consumers that
``assign()`` their partitions (generation -1), as Kafka allows for groups with no members.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fmq.engine.broker import Broker
from fmq.errors import FMQError
from fmq.message import INTERNAL_TOPIC_PREFIX
from fmq.protocol import Op
from fmq.server.fencing import follower_refusal
from fmq.server.kafka.apis import kafka_api
from fmq.server.kafka.error_codes import error_code
from fmq.server.kafka.session import NODE_ID, KafkaSession

GROUP_KEY = 0
TRANSACTION_KEY = 1  # a transactional id: this server is its coordinator too


@kafka_api(10, "FindCoordinator", 0, 4)
async def find_coordinator(session: KafkaSession, request: Any, version: int) -> dict:
    keys = list(request.coordinator_keys) if version >= 4 else [request.key]
    key_type = getattr(request, "key_type", GROUP_KEY)
    answers = []
    for key in keys:
        answer = {"key": key, "node_id": NODE_ID, "host": session.advertised_host,
                  "port": session.advertised_port, "error_code": ErrorCode.none,
                  "error_message": None}
        if key_type not in (GROUP_KEY, TRANSACTION_KEY):
            answer.update(node_id=-1, host="", port=-1,
                          error_code=ErrorCode.invalid_request,
                          error_message=f"unknown coordinator key type {key_type}")
        answers.append(answer)
    if version >= 4:
        return {"throttle_time": 0, "coordinators": answers}
    return {"throttle_time": 0, **answers[0]}


@kafka_api(8, "OffsetCommit", 2, 8)
async def offset_commit(session: KafkaSession, request: Any, version: int) -> dict:
    ctx = session.ctx
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            code = ErrorCode.none
            try:
                refusal = follower_refusal(ctx.replication, Op.COMMIT_OFFSET)
                if refusal is not None:
                    raise refusal
                await ctx.write(ctx.broker.commit_offset, request.group_id, topic.name,
                                p.partition_index, p.committed_offset)
            except FMQError as exc:
                code = error_code(exc)
            parts.append({"partition_index": p.partition_index, "error_code": code})
        topics.append({"name": topic.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


@kafka_api(9, "OffsetFetch", 1, 7)
async def offset_fetch(session: KafkaSession, request: Any, version: int) -> dict:
    ctx = session.ctx
    wanted = None if request.topics is None else [
        (t.name, list(t.partition_indexes)) for t in request.topics]
    topics = await ctx.read(_committed, ctx.broker, request.group_id, wanted)
    return {"throttle_time": 0, "topics": topics, "error_code": 0}


def _committed(broker: Broker, group: str, wanted: list[tuple[str, list[int]]] | None
               ) -> list[dict]:
    broker.wait_indexed(1.0)  # a commit just acknowledged is read back
    every = wanted is None
    if every:
        wanted = [(t["name"], list(range(t["queues"]))) for t in broker.topics.list()
                  if not t["name"].startswith(INTERNAL_TOPIC_PREFIX)]
    topics = []
    for name, partitions in wanted:
        parts = []
        for partition in partitions:
            offset = broker.committed_offset(group, name, partition)
            if every and offset is None:
                continue
            parts.append({"partition_index": partition,
                          "committed_offset": -1 if offset is None else offset,
                          "committed_leader_epoch": -1, "metadata": "",
                          "error_code": ErrorCode.none})
        if parts or not every:
            topics.append({"name": name, "partitions": parts})
    return topics
