"""Commits and committed offsets of partitions another broker group hosts, forwarded by the
consumer group's coordinator to that group's primary (:mod:`.group_links`).

A Kafka client sends every partition's commit to its group's coordinator; FMQ keeps a
queue's commits in the log of the broker group hosting the queue (so that ``fmq groups``,
the lag metrics and FMQ's routing consumer see them there, and they fail over with the
queue). The coordinator therefore writes its own group's partitions itself and asks each
other group's primary to write the rest, as FMQ's routing consumer commits each queue in
its group: COMMIT_OFFSET, pipelined, answered once durable there (and, in ``sync`` mode,
held by that group's followers). Committed offsets are read back the same way
(FETCH_OFFSET; GROUPS when the client asks for every partition).

A primary that is away (no primary: an election; down; not answering) never turns into a
success: its partitions get a Kafka error the clients retry (:data:`AWAY`, or
:data:`TIMED_OUT` when the request was sent and not answered in time, so it may have been
stored: the retry stores the same offset again).
"""

from __future__ import annotations

import asyncio
import json
import logging

from kio.schema.errors import ErrorCode

from fmq.errors import (
    FMQError,
    InvalidArgument,
    OffsetOutOfRange,
    RequestTimeout,
    SecurityError,
    UnknownQueue,
    UnknownTopic,
)
from fmq.protocol import Op
from fmq.server.kafka.error_codes import error_code
from fmq.server.kafka.group_links import BrokerGroupLinks

logger = logging.getLogger("fmq.server.kafka")

#: The other broker group's primary is away: Kafka's "the coordinator is loading its
#: offsets", which every client retries as it is (librdkafka, the Java client, kafka-python)
#: without looking for another coordinator.
AWAY = ErrorCode.coordinator_load_in_progress
#: Sent but not answered in time (it may have been stored): retried by every client.
TIMED_OUT = ErrorCode.request_timed_out
#: The codes meaning "try the whole request again".
RETRY_CODES = frozenset({AWAY, TIMED_OUT})

#: (topic, queue in that broker group, next offset) of one partition of a commit.
CommitRow = tuple[str, int, int]
#: (topic, queue in that broker group) of one partition asked for.
FetchRow = tuple[str, int]


def forward_error(exc: FMQError, broker_group: str, what: str) -> ErrorCode:
    """The Kafka code of a forwarded request's failure (logged)."""
    if isinstance(exc, OffsetOutOfRange):
        return ErrorCode.offset_out_of_range
    if isinstance(exc, UnknownTopic | UnknownQueue):
        return ErrorCode.unknown_topic_or_partition
    if isinstance(exc, SecurityError) and not exc.retriable:
        logger.error("kafka group coordinator: broker group %s refused the %s it forwards "
                     "(%s): the node connects there as it follows a primary (follow_tls, "
                     "follow_user, follow_password_file), and the follow_user needs commit-offsets, consume and describe on the "
                     "consumer groups of Kafka clients (docs/kafka.md, Consumer groups over "
                     "broker groups)", broker_group, what, exc)
        return ErrorCode.unknown_server_error
    if isinstance(exc, InvalidArgument):
        return ErrorCode.invalid_request
    if exc.retriable:
        logger.info("kafka group coordinator: %s in broker group %s not done (%s); the client "
                    "retries", what, broker_group, exc)
        return TIMED_OUT if isinstance(exc, RequestTimeout) else AWAY
    logger.warning("kafka group coordinator: %s in broker group %s failed: %s", what,
                   broker_group, exc)
    return error_code(exc)


async def commit_remote(links: BrokerGroupLinks, broker_group: str, group: str,
                        rows: list[CommitRow]) -> list[ErrorCode]:
    """Commit ``rows`` of consumer group ``group`` in ``broker_group``: each row's code."""
    async def one(topic: str, queue: int, offset: int) -> ErrorCode:
        try:
            await links.request(broker_group, Op.COMMIT_OFFSET, {
                "group": group, "topic": topic, "queue_id": queue, "next_offset": offset})
        except FMQError as exc:
            return forward_error(exc, broker_group, f"commit of {topic}/{queue}")
        return ErrorCode.none

    return list(await asyncio.gather(*(one(*row) for row in rows)))


async def fetch_remote(links: BrokerGroupLinks, broker_group: str, group: str,
                       rows: list[FetchRow]) -> list[tuple[ErrorCode, int]]:
    """The committed offsets of ``rows`` (-1: none) in ``broker_group``, each with its code."""
    async def one(topic: str, queue: int) -> tuple[ErrorCode, int]:
        try:
            answer = await links.request(broker_group, Op.FETCH_OFFSET, {
                "group": group, "topic": topic, "queue_id": queue})
        except (UnknownTopic, UnknownQueue):
            return ErrorCode.none, -1  # as here: a queue that does not exist has no commit
        except FMQError as exc:
            return forward_error(exc, broker_group, f"offset fetch of {topic}/{queue}"), -1
        return ErrorCode.none, answer["offset"]

    return list(await asyncio.gather(*(one(*row) for row in rows)))


async def committed_remote(links: BrokerGroupLinks, broker_group: str, group: str
                           ) -> tuple[ErrorCode, list[CommitRow]]:
    """Every (topic, queue, offset) consumer group ``group`` committed in ``broker_group``."""
    try:
        answer = await links.request(broker_group, Op.GROUPS, {"group": group})
    except FMQError as exc:
        return forward_error(exc, broker_group, f"offset listing of group {group!r}"), []
    rows = [(r["topic"], r["queue_id"], r["committed"])
            for g in json.loads(answer["json"])["groups"] if g["group"] == group
            for r in g["offsets"] if r["committed"] is not None]
    return ErrorCode.none, rows


async def committed_anywhere(links: BrokerGroupLinks, broker_groups: list[str], group: str
                             ) -> tuple[ErrorCode, bool]:
    """Whether consumer group ``group`` committed in any of ``broker_groups`` (the first
    failure's code when one could not be asked: then it is not known)."""
    answers = await asyncio.gather(*(committed_remote(links, g, group) for g in broker_groups))
    failed = next((code for code, _ in answers if code != ErrorCode.none), ErrorCode.none)
    return failed, any(rows for _, rows in answers)


def all_or_retry(codes: list[ErrorCode]) -> list[ErrorCode]:
    """A commit answered as one: when some partitions could not be stored for now, the
    others are answered with that retriable code too, as Kafka's coordinator answers a
    commit whose log append failed. A client retries a commit whose every partition failed
    (librdkafka retries only then); the partitions stored already are stored again with the
    same offsets, which changes nothing."""
    retry = next((c for c in codes if c in RETRY_CODES), None)
    if retry is None:
        return codes
    return [retry if c == ErrorCode.none else c for c in codes]
