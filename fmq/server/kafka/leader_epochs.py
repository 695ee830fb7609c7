"""OffsetForLeaderEpoch (key 23): where a leader epoch ends, so that a consumer can check its
position after the leader changed (KIP-320) instead of fetching from a log that may have
been cut under it.

FMQ's epochs are its broker group's (Metadata gives the group's epoch as every partition's
leader epoch; without a coordinator, 0) and FMQ does not keep where in each queue an epoch
began, so the answer for an epoch at or below the current one is that epoch and the
queue's stored end (Kafka's log end offset: every record this node holds, the ones its
followers do not hold yet included). That is Kafka's own answer for the current epoch, and
for an older one it is the truth FMQ keeps: a new primary never holds a queue offset with
other contents than the old one gave out below its high watermark (``sync`` mode,
docs/replication.md), so a consumer whose position is at or below the stored end goes on,
and one past it (records an ``async`` fail-over lost) is told where the log now ends and
resets there, as Kafka's consumers do on a truncation. An epoch above the current one gets
Kafka's "undefined" (-1, -1).

``current_leader_epoch`` (v2+) fences as Kafka does: newer than this node's view is
UNKNOWN_LEADER_EPOCH (its metadata is ahead: retry), older is FENCED_LEADER_EPOCH
(refresh). A node that does not lead the partition (a follower, another broker group's
partition) answers NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fmq.engine.broker import Broker
from fmq.security import Operation
from fmq.server.kafka import access
from fmq.server.kafka.apis import kafka_api, on_topics
from fmq.server.kafka.brokers import GroupView
from fmq.server.kafka.routed import local_queue
from fmq.server.kafka.session import KafkaSession

UNDEFINED = -1


@kafka_api(23, "OffsetForLeaderEpoch", 2, 4, access=on_topics(Operation.DESCRIBE))
async def offset_for_leader_epoch(session: KafkaSession, request: Any, version: int) -> dict:
    ctx = session.ctx
    leads, epoch = leadership(session)
    topics = []
    for topic in request.topics:
        denied = access.refusal(session, topic.topic)
        parts = []
        for p in topic.partitions:
            if denied is not None:
                parts.append(_error(p.partition, denied))
            elif not leads:
                parts.append(_error(p.partition, ErrorCode.not_leader_or_follower))
            else:
                parts.append(await ctx.read(_end, ctx.broker, topic.topic, p.partition,
                                            local_queue(session, topic.topic, p.partition),
                                            p.leader_epoch, p.current_leader_epoch, epoch))
        topics.append({"topic": topic.topic, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def leadership(session: KafkaSession) -> tuple[bool, int]:
    """(whether this node leads its group's partitions, the epoch Metadata gives them)."""
    brokers = session.brokers
    if brokers is None:
        return True, 0
    view = brokers.view.groups.get(brokers.group, GroupView())
    return view.leader == brokers.me.node_id, view.epoch


def _error(partition: int, code: ErrorCode) -> dict:
    return {"error_code": code, "partition": partition, "leader_epoch": UNDEFINED,
            "end_offset": UNDEFINED}


def _end(broker: Broker, topic: str, partition: int, queue: int | None, asked: int,
         current: int, epoch: int) -> dict:
    if queue is None:
        return _error(partition, ErrorCode.not_leader_or_follower)
    if current >= 0 and current != epoch:
        return _error(partition, ErrorCode.unknown_leader_epoch if current > epoch
                      else ErrorCode.fenced_leader_epoch)
    if broker.topics.get(topic) is None or not 0 <= queue < broker.topics.queue_count(topic):
        return _error(partition, ErrorCode.unknown_topic_or_partition)
    if asked > epoch:
        return {"error_code": ErrorCode.none, "partition": partition,
                "leader_epoch": UNDEFINED, "end_offset": UNDEFINED}
    broker.wait_indexed(1.0)  # an acknowledged send is counted (indexed a moment later)
    _, stored_end = broker.reads.stored_range(topic, queue)
    return {"error_code": ErrorCode.none, "partition": partition, "leader_epoch": asked,
            "end_offset": stored_end}
