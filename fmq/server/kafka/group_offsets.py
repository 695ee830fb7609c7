"""OffsetCommit (key 8) and OffsetFetch (key 9) on FMQ's consumer offsets: a Kafka group's
committed offset of partition P of topic T is the FMQ consumer group's committed offset of
queue P of T, an OFFSET record in the log (:mod:`fmq.engine.offsets`). One store for both
protocols: ``fmq groups``, the lag metrics and the console show a Kafka group like any
other, and an FMQ consumer of the same group resumes where a Kafka one committed.

A commit is taken from a member of the group's current generation, or with generation -1
from a consumer outside any group (``assign()``) while the group has no members, as Kafka
does. The commit's metadata string is not kept (OffsetFetch answers it empty), and neither
is the leader epoch. A partition never committed answers offset -1.

A topic routed over several broker groups: partition ``base + q`` of this node's group is
its queue ``q``, and its commit is that queue's. A partition another broker group hosts is
committed in that group's log by FMQ's own routing consumer; Kafka commits all of a
group's partitions to one coordinator, and this one cannot write another group's log, so
such a partition is refused with INVALID_REQUEST (commit) or answered with it (fetch), and
the server logs which: never committed in the wrong queue, never read as "no commit".
"""

from __future__ import annotations

import logging
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
from fmq.server.kafka.routed import global_index, local_queue
from fmq.server.kafka.session import KafkaSession

logger = logging.getLogger("fmq.server.kafka")

#: (topic, queue, offset) of one partition of a commit; queue None: another broker group
#: hosts the partition.
Row = tuple[str, int | None, int]


@kafka_api(8, "OffsetCommit", 2, 9, access=on_groups(Operation.COMMIT_OFFSETS))
async def offset_commit(session: KafkaSession, request: Any, version: int) -> dict:
    asked = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    rows = [(t.name, local_queue(session, t.name, p.partition_index), p.committed_offset)
            for t in request.topics for p in t.partitions]
    _log_foreign(session, "commit", request.group_id, asked, rows)
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
    for (topic, partition), code in zip(asked, codes, strict=True):
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
        if partition is None:
            codes.append(ErrorCode.invalid_request)
            continue
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
            found = await ctx.read(_committed, ctx.broker, g.group_id, topics,
                                   Placement(session))
            _log_fetch_foreign(session, g.group_id, found)
            groups.append({"group_id": g.group_id, "topics": found,
                           "error_code": ErrorCode.none})
        return {"throttle_time": 0, "groups": groups}
    denied = refused or access.refusal(session, request.group_id)
    if denied is not None:
        return {"throttle_time": 0, "topics": [], "error_code": denied}
    topics = (None if request.topics is None
              else [(t.name, list(t.partition_indexes)) for t in request.topics])
    found = await ctx.read(_committed, ctx.broker, request.group_id, topics,
                           Placement(session))
    _log_fetch_foreign(session, request.group_id, found)
    return {"throttle_time": 0, "topics": found, "error_code": ErrorCode.none}


class Placement:
    """Kafka partitions and this node's queues, both ways (a routed topic's partitions are
    its route's global indices, :mod:`.routed`)."""

    def __init__(self, session: KafkaSession) -> None:
        self.session = session

    def queue(self, topic: str, partition: int) -> int | None:
        """The queue holding ``partition``; None: another broker group hosts it."""
        return local_queue(self.session, topic, partition)

    def partition(self, topic: str, queue: int) -> int:
        return global_index(self.session, topic, queue)


def _committed(broker: Broker, group: str, topics: list[tuple[str, list[int]]] | None,
               placement: Placement) -> list[dict]:
    """The committed offsets of ``topics`` (None: every partition the group committed in
    here), read in a reader thread."""
    if topics is None:
        by_topic: dict[str, list[int]] = {}
        try:
            rows = broker.inventory.groups(group)
        except InvalidArgument:
            rows = []  # a group id FMQ cannot hold has committed nothing
        for row in rows:
            if row["committed"] is None:  # a queue of its topic it never committed in
                continue
            by_topic.setdefault(row["topic"], []).append(
                placement.partition(row["topic"], row["queue_id"]))
        topics = sorted(by_topic.items())
    return [{"name": topic, "partitions": [
                _partition(broker, group, topic, p, placement.queue(topic, p))
                for p in partitions]}
            for topic, partitions in topics]


def _partition(broker: Broker, group: str, topic: str, partition: int, queue: int | None
               ) -> dict:
    if queue is None:  # another broker group's: its commits are in that group's log
        return {"partition_index": partition, "committed_offset": -1,
                "committed_leader_epoch": -1, "metadata": "",
                "error_code": ErrorCode.invalid_request}
    try:
        offset = broker.reads.committed_offset(group, topic, queue)
    except (InvalidArgument, UnknownTopic):
        offset = None
    return {"partition_index": partition, "committed_offset": -1 if offset is None else offset,
            "committed_leader_epoch": -1, "metadata": "", "error_code": ErrorCode.none}


def _log_foreign(session: KafkaSession, what: str, group: str,
                 asked: list[tuple[str, int]], rows: list[Row]) -> None:
    foreign = [f"{topic}/{partition}" for (topic, partition), (_, queue, _) in
               zip(asked, rows, strict=True) if queue is None]
    if foreign:
        logger.info("kafka %s of group %r from %s refused for %s: hosted by another broker "
                    "group, whose log keeps their commits (read routed topics with assign() "
                    "and no commits, or with FMQ's routing consumer)", what, group, session.peer,
                    ", ".join(foreign))


def _log_fetch_foreign(session: KafkaSession, group: str, found: list[dict]) -> None:
    foreign = [f"{t['name']}/{p['partition_index']}" for t in found for p in t["partitions"]
               if p["error_code"] == ErrorCode.invalid_request]
    if foreign:
        logger.info("kafka offset fetch of group %r from %s refused for %s: hosted by another "
                    "broker group, whose log keeps their commits", group, session.peer,
                    ", ".join(foreign))
