"""ListOffsets (key 2): a queue's first offset (earliest, -2), its next offset (latest, -1),
or the first offset stored at or after a time, through FMQ's time index."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fmq.engine.broker import Broker
from fmq.security import Operation
from fmq.server.kafka import access
from fmq.server.kafka.apis import kafka_api, on_topics
from fmq.server.kafka.routed import local_queue
from fmq.server.kafka.session import KafkaSession

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


@kafka_api(2, "ListOffsets", 1, 7, access=on_topics(Operation.DESCRIBE))
async def list_offsets(session: KafkaSession, request: Any, version: int) -> dict:
    ctx = session.ctx
    topics = []
    for topic in request.topics:
        denied = access.refusal(session, topic.name)
        if denied is not None:
            parts = [{"partition_index": p.partition_index, "error_code": denied,
                      "timestamp": -1, "offset": -1, "leader_epoch": -1}
                     for p in topic.partitions]
        else:
            parts = [await ctx.read(_offset, ctx.broker, topic.name, p.partition_index,
                                    local_queue(session, topic.name, p.partition_index),
                                    p.timestamp) for p in topic.partitions]
        topics.append({"name": topic.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def _offset(broker: Broker, topic: str, index: int, partition: int | None, timestamp: int
            ) -> dict:
    """``partition``: this node's queue holding Kafka partition ``index`` (None: another
    broker group's)."""
    answer = {"partition_index": index, "error_code": ErrorCode.none, "timestamp": -1,
              "offset": -1, "leader_epoch": 0}
    if partition is None:
        answer["error_code"] = ErrorCode.not_leader_or_follower
        return answer
    if broker.topics.get(topic) is None or not 0 <= partition < broker.topics.queue_count(topic):
        answer["error_code"] = ErrorCode.unknown_topic_or_partition
        return answer
    broker.wait_indexed(1.0)  # an acknowledged send is counted (indexed a moment later)
    low, high = broker.reads.queue_range(topic, partition)
    if timestamp == EARLIEST:
        answer["offset"] = low
    elif timestamp in (LATEST, MAX_TIMESTAMP):
        # MAX_TIMESTAMP: FMQ's store times only grow, so the newest message has the largest.
        answer["offset"] = high if timestamp == LATEST else max(low, high - 1)
    elif timestamp < 0:
        answer["error_code"] = ErrorCode.invalid_request
    else:
        offset = broker.reads.offset_for_time(topic, partition, timestamp)
        if offset < high:
            found = broker.reads.pull(topic, partition, offset, 1)
            if found:
                answer["offset"] = found[0].queue_offset
                answer["timestamp"] = found[0].store_time
    return answer
