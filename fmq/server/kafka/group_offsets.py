"""OffsetCommit (key 8) and OffsetFetch (key 9) on FMQ's consumer offsets: a Kafka group's
committed offset of partition P of topic T is the FMQ consumer group's committed offset of
the queue holding P, an OFFSET record in the log of the broker group hosting it
(:mod:`fmq.engine.offsets`). One store for both protocols: ``fmq groups``, the lag metrics
and the console show a Kafka group like any other, and an FMQ consumer of the same group
resumes where a Kafka one committed.

Only the group's coordinator answers (:mod:`.group_placement`; NOT_COORDINATOR elsewhere).
A commit is taken from a member of the group's current generation, or with generation -1
from a consumer outside any group (``assign()``) while the group has no members, as Kafka
does. The commit's metadata string is not kept (OffsetFetch answers it empty), and neither
is the leader epoch. A partition never committed answers offset -1.

A topic routed over several broker groups: partition ``base + q`` is queue ``q`` of the
group whose route entry starts at ``base``. The coordinator commits and reads its own
group's queues itself and forwards the others to their groups' primaries
(:mod:`.group_remote_offsets`): a commit is answered once every partition is stored where
it is hosted, or with an error the client retries, never a success without storing.
"""

from __future__ import annotations

import asyncio
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
from fmq.server.kafka.group_links import links_of
from fmq.server.kafka.group_placement import check_coordinator, coordinator_refusal
from fmq.server.kafka.group_registry import coordinator_of
from fmq.server.kafka.group_remote_offsets import (
    RETRY_CODES,
    CommitRow,
    FetchRow,
    all_or_retry,
    commit_remote,
    committed_remote,
    fetch_remote,
)
from fmq.server.kafka.routed import (
    RoutedPartition,
    cluster_broker_groups,
    global_index,
    route_of,
)
from fmq.server.kafka.session import KafkaSession
from fmq.server.kafka.unrouted_hosts import partition_places, unrouted_hosts_of

logger = logging.getLogger("fmq.server.kafka")


@kafka_api(8, "OffsetCommit", 2, 9, access=on_groups(Operation.COMMIT_OFFSETS))
async def offset_commit(session: KafkaSession, request: Any, version: int) -> dict:
    asked = [(t.name, p.partition_index, p.committed_offset)
             for t in request.topics for p in t.partitions]
    try:
        denied = access.refusal(session, request.group_id)
        if denied is not None:
            raise KafkaGroupError(denied)
        check_coordinator(session, request.group_id)
        _check_group_id(request.group_id)
        coordinator_of(session.ctx).check_commit(
            request.group_id, request.member_id, getattr(request, "group_instance_id", None),
            request.generation_id_or_member_epoch)
        codes = await _commit_everywhere(session, request.group_id, asked)
    except KafkaGroupError as exc:
        codes = [exc.code] * len(asked)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition, _), code in zip(asked, codes, strict=True):
        by_topic.setdefault(topic, []).append({"partition_index": partition,
                                               "error_code": code})
    return {"throttle_time": 0,
            "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()]}


def _check_group_id(group: str) -> None:
    try:
        check_name(group, "group", allow_none=False)
    except InvalidArgument:
        raise KafkaGroupError(ErrorCode.invalid_group_id) from None


def _own_group(session: KafkaSession) -> str:
    return session.brokers.group if session.brokers is not None else ""


async def _commit_everywhere(session: KafkaSession, group: str,
                             asked: list[tuple[str, int, int]]) -> list[ErrorCode]:
    """Commit each (topic, partition, offset) in the broker group hosting it: this one's
    here, the others' forwarded to their primaries, all at once; each partition's code."""
    ctx = session.ctx
    # A partition no broker group hosts (past the route, or of a removed group) is
    # unknown, as Kafka answers a partition the topic does not have.
    codes = [ErrorCode.unknown_topic_or_partition] * len(asked)
    by_group: dict[str, list[tuple[int, CommitRow]]] = {}  # broker group -> (index, row)
    places = await partition_places(session, [(t, p) for t, p, _ in asked])
    for i, ((topic, _, offset), host) in enumerate(zip(asked, places, strict=True)):
        if isinstance(host, RoutedPartition):
            by_group.setdefault(host.group, []).append((i, (topic, host.queue, offset)))
        else:
            codes[i] = host
    own, links = _own_group(session), links_of(ctx)
    steps = []
    for broker_group, placed in by_group.items():
        rows = [row for _, row in placed]
        if broker_group == own:
            steps.append(ctx.write(_commit_here, ctx.broker, group, rows))
        else:
            steps.append(commit_remote(links, broker_group, group, rows))
    for (broker_group, placed), answered in zip(by_group.items(), await asyncio.gather(*steps),
                                                strict=True):
        for (i, (topic, _, _)), code in zip(placed, answered, strict=True):
            codes[i] = code
            if code == ErrorCode.unknown_topic_or_partition:
                unrouted_hosts_of(ctx).forget(topic, broker_group)
    return all_or_retry(codes)


def _commit_here(broker: Broker, group: str, rows: list[CommitRow]) -> list[ErrorCode]:
    """Commit every row FMQ takes, as one batch of OFFSET records (in a worker thread);
    each row's error code."""
    codes, good = [], []
    for topic, queue, offset in rows:
        try:
            broker.offsets.check(group, topic, queue, offset)
        except FMQError as exc:
            codes.append(_commit_error(exc))
            continue
        codes.append(ErrorCode.none)
        good.append((topic, queue, offset))
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
    if version >= 8:
        groups = []
        for g in request.groups:
            topics = (None if g.topics is None
                      else [(t.name, list(t.partition_indexes)) for t in g.topics])
            code, found = await _fetch_group(session, g.group_id, topics)
            groups.append({"group_id": g.group_id, "topics": found, "error_code": code})
        return {"throttle_time": 0, "groups": groups}
    topics = (None if request.topics is None
              else [(t.name, list(t.partition_indexes)) for t in request.topics])
    code, found = await _fetch_group(session, request.group_id, topics)
    return {"throttle_time": 0, "topics": found, "error_code": code}


async def _fetch_group(session: KafkaSession, group: str,
                       topics: list[tuple[str, list[int]]] | None
                       ) -> tuple[ErrorCode, list[dict]]:
    """One group's answer: its error code and topics. A broker group whose commits could
    not be read now makes the whole answer that retriable error, at the top (clients retry
    it as a whole; librdkafka would leave a partition with an error of its own unread) and
    in each partition (version 1 has no top-level code)."""
    # A follower's copy may lag the primary's; another node is not the coordinator.
    denied = coordinator_refusal(session, group) or access.refusal(session, group)
    if denied is not None:
        return denied, []
    try:
        check_name(group, "group", allow_none=False)
    except InvalidArgument:
        return ErrorCode.none, _answer([(t, p, -1) for t, ps in topics or [] for p in ps])
    if topics is None:
        code, rows = await _fetch_all(session, group)
    else:
        code, rows = await _fetch_named(session, group, topics)
    if code != ErrorCode.none:
        return code, _answer([(t, p, -1) for t, p, _ in rows], code)
    return ErrorCode.none, _answer(rows)


def _answer(rows: list[tuple[str, int, int]], code: ErrorCode = ErrorCode.none) -> list[dict]:
    """OffsetFetch's topics for (topic, partition, offset) rows, in their order."""
    by_topic: dict[str, list[dict]] = {}
    for topic, partition, offset in rows:
        by_topic.setdefault(topic, []).append({
            "partition_index": partition, "committed_offset": offset,
            "committed_leader_epoch": -1, "metadata": "", "error_code": code})
    return [{"name": t, "partitions": p} for t, p in by_topic.items()]


async def _fetch_named(session: KafkaSession, group: str,
                       topics: list[tuple[str, list[int]]]
                       ) -> tuple[ErrorCode, list[tuple[str, int, int]]]:
    """The committed offset of each partition asked for, each read in the broker group
    hosting it; (the first retriable failure or none, rows)."""
    ctx = session.ctx
    asked = [(t, p) for t, ps in topics for p in ps]
    offsets = [-1] * len(asked)  # a partition no broker group hosts has no commit
    by_group: dict[str, list[tuple[int, int]]] = {}  # broker group -> (index, queue)
    failed = ErrorCode.none
    for i, host in enumerate(await partition_places(session, asked)):
        if isinstance(host, RoutedPartition):
            by_group.setdefault(host.group, []).append((i, host.queue))
        elif host in RETRY_CODES and failed == ErrorCode.none:
            failed = host  # a broker group that may hold the topic could not be asked
    own, links = _own_group(session), links_of(ctx)
    steps = []
    for broker_group, placed in by_group.items():
        rows = [(asked[i][0], queue) for i, queue in placed]
        if broker_group == own:
            steps.append(ctx.read(_committed_here, ctx.broker, group, rows))
        else:
            steps.append(fetch_remote(links, broker_group, group, rows))
    for placed, answered in zip(by_group.values(), await asyncio.gather(*steps), strict=True):
        for (i, _), (code, offset) in zip(placed, answered, strict=True):
            offsets[i] = offset
            if code != ErrorCode.none and failed == ErrorCode.none:
                failed = code
    return failed, [(t, p, o) for (t, p), o in zip(asked, offsets, strict=True)]


def _committed_here(broker: Broker, group: str, rows: list[FetchRow]
                    ) -> list[tuple[ErrorCode, int]]:
    """The committed offsets of this node's queues ``rows`` (-1: none), in a reader
    thread."""
    out = []
    for topic, queue in rows:
        try:
            offset = broker.reads.committed_offset(group, topic, queue)
        except (InvalidArgument, UnknownTopic, UnknownQueue):
            offset = None
        out.append((ErrorCode.none, -1 if offset is None else offset))
    return out


async def _fetch_all(session: KafkaSession, group: str
                     ) -> tuple[ErrorCode, list[tuple[str, int, int]]]:
    """Every partition ``group`` committed, in this broker group and in every other group
    of the cluster (a routed topic's queues there by global index; a topic without a route
    that one other group alone holds, and this one does not, by queue), sorted."""
    ctx = session.ctx
    own = _own_group(session)
    here = await ctx.read(_all_committed_here, ctx.broker, group)
    rows = [(topic, global_index(session, topic, queue), offset)
            for topic, queue, offset in here]
    others = [g for g in _cluster_groups(session) if g != own]
    links = links_of(ctx)
    failed = ErrorCode.none
    unrouted: dict[str, dict[str, list[CommitRow]]] = {}  # topic -> broker group -> rows
    for broker_group, (code, found) in zip(others, await asyncio.gather(
            *(committed_remote(links, g, group) for g in others)), strict=True):
        if code != ErrorCode.none:
            failed = failed if failed != ErrorCode.none else code
            continue
        for topic, queue, offset in found:
            if route_of(session, topic) is None:
                unrouted.setdefault(topic, {}).setdefault(broker_group, []).append(
                    (topic, queue, offset))
                continue
            partition = _global_index_in(session, topic, broker_group, queue)
            if partition is not None:
                rows.append((topic, partition, offset))
    held_here = {topic for topic, _, _ in here}
    for topic, by_group in unrouted.items():
        # Held by this group or by several: not one Kafka topic of this cluster's clients.
        if topic not in held_here and len(by_group) == 1:
            rows.extend(row for found in by_group.values() for row in found)
    return failed, sorted(rows)


def _cluster_groups(session: KafkaSession) -> list[str]:
    """The broker groups whose commits the coordinator reads: every group of the cluster."""
    return cluster_broker_groups(session.ctx) if session.brokers is not None else []


def _all_committed_here(broker: Broker, group: str) -> list[CommitRow]:
    """(topic, queue, offset) of every queue here ``group`` committed in (reader thread)."""
    try:
        found = broker.inventory.groups(group)
    except InvalidArgument:
        return []  # a group id FMQ cannot hold has committed nothing
    return [(r["topic"], r["queue_id"], r["committed"]) for r in found
            if r["committed"] is not None]


def _global_index_in(session: KafkaSession, topic: str, broker_group: str, queue: int
                     ) -> int | None:
    """The Kafka partition of ``broker_group``'s queue ``queue`` of routed ``topic``: None
    unless its route names that group."""
    route = route_of(session, topic)
    entry = route.entry(broker_group) if route is not None else None
    if entry is None or not 0 <= queue < entry.queues:
        return None
    return entry.base + queue
