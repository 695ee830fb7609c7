"""OffsetCommit (key 8) and OffsetFetch (key 9) on FMQ's consumer offsets: a Kafka group's
committed offset of partition P of topic T is the FMQ consumer group's committed offset of
queue P of T, an OFFSET record in the log (:mod:`fmq.engine.offsets`). One store for both
protocols: ``fmq groups``, the lag metrics and the console show a Kafka group like any
other, and an FMQ consumer of the same group resumes where a Kafka one committed.

A commit is taken from a member of the group's current generation, or with generation -1
from a consumer outside any group (``assign()``) while the group has no members, as Kafka
does. The commit's metadata string is not kept (OffsetFetch answers it empty), and neither
is the leader epoch. A partition never committed answers offset -1.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from fmq.engine.broker import Broker
from fmq.errors import FMQError, InvalidArgument, OffsetOutOfRange, UnknownQueue, UnknownTopic
from fmq.message import check_name
from fmq.security import Operation
from fmq.server.kafka import access
from fmq.server.kafka.apis import kafka_api, on_groups
from fmq.server.kafka.error_codes import error_code
from fmq.server.kafka.group_coordinator import KafkaGroupError
from fmq.server.kafka.group_placement import check_coordinator, coordinator_refusal
from fmq.server.kafka.group_registry import coordinator_of
from fmq.server.kafka.session import KafkaSession

#: (topic, partition, offset) of one partition of a commit.
Row = tuple[str, int, int]


@kafka_api(8, "OffsetCommit", 2, 9, access=on_groups(Operation.COMMIT_OFFSETS))
async def offset_commit(session: KafkaSession, request: Any, version: int) -> dict:
    rows = [(t.name, p.partition_index, p.committed_offset)
            for t in request.topics for p in t.partitions]
    try:
        denied = access.refusal(session, request.group_id)
        if denied is not None:
            raise KafkaGroupError(denied)
        check_coordinator(session)
        coordinator_of(session.ctx).check_commit(
            request.group_id, request.member_id, getattr(request, "group_instance_id", None),
            request.generation_id_or_member_epoch)
        codes = await session.ctx.write(_commit, session.ctx.broker, request.group_id, rows)
    except KafkaGroupError as exc:
        codes = [exc.code] * len(rows)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition, _), code in zip(rows, codes, strict=True):
        by_topic.setdefault(topic, []).append({"partition_index": partition,
                                               "error_code": code})
    return {"throttle_time": 0,
            "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()]}


def _commit(broker: Broker, group: str, rows: list[Row]) -> list[ErrorCode]:
    """Commit every row FMQ takes, as one batch of OFFSET records (in a worker thread);
    each row's error code."""
    try:
        check_name(group, "group", allow_none=False)
    except InvalidArgument:
        return [ErrorCode.invalid_group_id] * len(rows)
    codes, good = [], []
    for topic, partition, offset in rows:
        try:
            broker.offsets.check(group, topic, partition, offset)
        except FMQError as exc:
            codes.append(_commit_error(exc))
            continue
        codes.append(ErrorCode.none)
        good.append((topic, partition, offset))
    if good:
        try:
            broker.offsets.commit(group, good)
        except FMQError as exc:
            code = error_code(exc)
            codes = [code if c == ErrorCode.none else c for c in codes]
    return codes


def _commit_error(exc: FMQError) -> ErrorCode:
    if isinstance(exc, UnknownTopic | UnknownQueue):
        return ErrorCode.unknown_topic_or_partition
    if isinstance(exc, OffsetOutOfRange):
        return ErrorCode.offset_out_of_range
    if isinstance(exc, InvalidArgument):  # a topic name or offset FMQ cannot hold
        return ErrorCode.invalid_request
    return error_code(exc)


@kafka_api(9, "OffsetFetch", 1, 9, access=on_groups(Operation.CONSUME))
async def offset_fetch(session: KafkaSession, request: Any, version: int) -> dict:
    ctx = session.ctx
    refused = coordinator_refusal(session)  # a follower's copy may lag the primary's
    if version >= 8:
        groups = []
        for g in request.groups:
            denied = refused or access.refusal(session, g.group_id)
            if denied is not None:
                groups.append({"group_id": g.group_id, "topics": [], "error_code": denied})
                continue
            topics = (None if g.topics is None
                      else [(t.name, list(t.partition_indexes)) for t in g.topics])
            found = await ctx.read(_committed, ctx.broker, g.group_id, topics)
            groups.append({"group_id": g.group_id, "topics": found,
                           "error_code": ErrorCode.none})
        return {"throttle_time": 0, "groups": groups}
    denied = refused or access.refusal(session, request.group_id)
    if denied is not None:
        return {"throttle_time": 0, "topics": [], "error_code": denied}
    topics = (None if request.topics is None
              else [(t.name, list(t.partition_indexes)) for t in request.topics])
    found = await ctx.read(_committed, ctx.broker, request.group_id, topics)
    return {"throttle_time": 0, "topics": found, "error_code": ErrorCode.none}


def _committed(broker: Broker, group: str, topics: list[tuple[str, list[int]]] | None
               ) -> list[dict]:
    """The committed offsets of ``topics`` (None: every partition the group committed in),
    read in a reader thread."""
    if topics is None:
        by_topic: dict[str, list[int]] = {}
        try:
            rows = broker.inventory.groups(group)
        except InvalidArgument:
            rows = []  # a group id FMQ cannot hold has committed nothing
        for row in rows:
            by_topic.setdefault(row["topic"], []).append(row["queue_id"])
        topics = sorted(by_topic.items())
    return [{"name": topic, "partitions": [_partition(broker, group, topic, p)
                                           for p in partitions]}
            for topic, partitions in topics]


def _partition(broker: Broker, group: str, topic: str, partition: int) -> dict:
    try:
        offset = broker.reads.committed_offset(group, topic, partition)
    except (InvalidArgument, UnknownTopic):
        offset = None
    return {"partition_index": partition, "committed_offset": -1 if offset is None else offset,
            "committed_leader_epoch": -1, "metadata": "", "error_code": ErrorCode.none}
