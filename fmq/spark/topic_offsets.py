"""Positions of the topic source: the options that choose where a read starts and ends,
the server's consumable ends of every queue read as one consistent snapshot, and the cut
of a micro-batch to ``maxMessagesPerTrigger``.

Offsets are kept as Spark keeps a source's offsets in its checkpoint, as JSON:
``{"orders": {"0": 12, "1": 7}, ...}``, topic to queue key to the next queue offset to
read. A queue key is the queue id (a string) for a topic outside a cluster and
``"group/queue id"`` (``{"orders": {"g1/0": 12, "g2/0": 3}}``) for a topic routed over
broker groups (:mod:`fmq.spark.topic_groups`). A range ``start .. end`` of one queue holds queue offsets ``start`` to
``end - 1``; every one of them was consumable when ``end`` was read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fmq.client.tls import TLSOptions
from fmq.errors import FMQError, InvalidArgument
from fmq.message import check_topic
from fmq.protocol import Op
from fmq.spark.errors import GroupUnreachable
from fmq.spark.topic_groups import GroupClients, Queue, queue_key, split_key

logger = logging.getLogger("fmq.spark")

Offsets = dict[str, dict[str, int]]

EARLIEST = -2  # in per-queue JSON, as in Kafka's connector
LATEST = -1
#: Rounds of queue ranges read before the ends are taken although they still moved.
SNAPSHOT_ROUNDS = 20


def option(options: dict, name: str) -> str | None:
    """An option by its case-insensitive name (Spark lower-cases them; a direct call may
    not), or None."""
    for key, value in options.items():
        if key.lower() == name.lower():
            return None if value is None else str(value)
    return None


def required(options: dict, name: str, example: str) -> str:
    value = option(options, name)
    if not value:
        raise InvalidArgument(f'the fmq-topic source needs the option {name}, e.g. '
                              f'.option("{name}", "{example}")')
    return value


def access_options(options: dict) -> dict[str, Any]:
    """The client's TLS and log-in from the source's options (``tls``, ``caFile``,
    ``certFile``, ``keyFile``, ``user``, ``passwordFile``; without ``user`` the client
    takes FMQ_USER and FMQ_PASSWORD from the environment, as every client does)."""
    ca, cert = option(options, "caFile"), option(options, "certFile")
    tls_flag = (option(options, "tls") or "false").lower()
    if tls_flag not in ("true", "false"):
        raise InvalidArgument(f'the option tls must be "true" or "false", not {tls_flag!r}')
    access: dict[str, Any] = {}
    if tls_flag == "true" or ca or cert:
        access["tls"] = TLSOptions(ca_file=ca, cert_file=cert,
                                   key_file=option(options, "keyFile"))
    if option(options, "user"):
        access["user"] = option(options, "user")
        access["password_file"] = option(options, "passwordFile")
    elif option(options, "passwordFile"):
        raise InvalidArgument("the option passwordFile needs the option user too")
    return access


def parse_topics(options: dict) -> list[str]:
    """The ``subscribe`` option: one topic or several, comma-separated."""
    topics = [t.strip() for t in required(options, "subscribe", "orders,payments").split(",")]
    topics = [t for t in topics if t]
    if not topics:
        raise InvalidArgument('option subscribe names no topic: give e.g. "orders,payments"')
    for t in topics:
        check_topic(t)
    if len(set(topics)) != len(topics):
        raise InvalidArgument(f"option subscribe names a topic twice: {','.join(topics)}")
    return topics


def positive_int(options: dict, name: str) -> int | None:
    value = option(options, name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise InvalidArgument(f"option {name} must be a whole number of at least 1, "
                              f"not {value!r}")
    return number


@dataclass
class Position:
    """Where reading starts (or ends) in every queue: ``earliest``, ``latest``, the
    first message stored at or after ``timestamp_ms``, or per queue (``queues``; queues
    not named take ``default``)."""

    kind: str  # earliest | latest | timestamp | queues
    timestamp_ms: int = 0
    queues: dict[str, dict[str, int]] = field(default_factory=dict)  # topic -> key -> offset
    default: int = EARLIEST


def parse_position(value: str, name: str, topics: Sequence[str], allowed: tuple[str, ...],
                   default: int) -> Position:
    """``earliest``, ``latest`` (each only where ``allowed``) or per-queue JSON such as
    ``{"orders": {"0": 12, "3": -2}}`` (-2: earliest, -1: latest)."""
    text = value.strip()
    if text.lower() in allowed:
        return Position(text.lower())
    if not text.startswith("{"):
        raise InvalidArgument(f"option {name} must be {' or '.join(allowed)} or per-queue JSON "
                              f'like {{"{topics[0]}": {{"0": 12}}}}, not {value!r}')
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"option {name} is not valid JSON ({exc}): {value!r}") from None
    if not isinstance(parsed, dict):
        raise InvalidArgument(f"option {name} must be a JSON object of topics: {value!r}")
    queues: dict[str, dict[str, int]] = {}
    for topic, per_queue in parsed.items():
        if topic not in topics:
            raise InvalidArgument(f"option {name} names topic {topic!r}, which is not in "
                                  f"subscribe ({','.join(topics)})")
        if not isinstance(per_queue, dict):
            raise InvalidArgument(f"option {name}: topic {topic!r} needs an object of queue "
                                  f'ids to offsets, like {{"0": 12}}')
        queues[topic] = {}
        for qid, off in per_queue.items():
            try:
                group, local = split_key(qid)
            except InvalidArgument:
                local = -1
            if local < 0 or isinstance(off, bool) or not isinstance(off, int) \
                    or off < EARLIEST:
                raise InvalidArgument(
                    f"option {name}: topic {topic!r} queue {qid!r} -> {off!r}: queues are "
                    f"whole numbers (group/number over several broker groups), offsets "
                    f"whole numbers >= 0 or -2 (earliest), -1 (latest)")
            queues[topic][queue_key(group, local)] = off
    return Position("queues", queues=queues, default=default)


def parse_start(options: dict, topics: Sequence[str], default: str) -> Position:
    """``startingOffsets`` or ``startingTimestamp`` (not both); ``default`` otherwise."""
    offsets = option(options, "startingOffsets")
    timestamp = option(options, "startingTimestamp")
    if offsets is not None and timestamp is not None:
        raise InvalidArgument("give startingOffsets or startingTimestamp, not both")
    if timestamp is not None:
        try:
            ms = int(timestamp)
        except ValueError:
            ms = -1
        if ms < 0:
            raise InvalidArgument(f"option startingTimestamp is milliseconds since the epoch "
                                  f"(a whole number >= 0), not {timestamp!r}")
        return Position("timestamp", timestamp_ms=ms)
    return parse_position(offsets or default, "startingOffsets", topics,
                          ("earliest", "latest"), EARLIEST)


Ranges = dict[tuple[str, str], tuple[int, int]]  # (topic, queue key) -> (min, next)


def _ranges_once(clients: GroupClients, queues: list[Queue]) -> Ranges:
    keys = [(t, queue_key(g, q)) for t, g, q in queues]
    # All requests in flight at once: the round takes about one round trip, so a
    # transaction committed meanwhile is rarely caught half-way (see consistent_ranges).
    try:
        futures = [clients.client(t, g).submit(Op.QUEUE_RANGE, {"topic": t, "queue_id": q})
                   for t, g, q in queues]
        answers = [f.result(clients.base.request_timeout) for f in futures]
        return {key: (int(a["min_offset"]), int(a["next_offset"]))
                for key, a in zip(keys, answers, strict=True)}
    except GroupUnreachable:
        raise
    except FMQError as exc:
        if not exc.retriable:
            raise
    except TimeoutError:
        pass
    return {key: clients.queue_range(*queue)  # with retries
            for key, queue in zip(keys, queues, strict=True)}


def consistent_ranges(clients: GroupClients, topics: Sequence[str]) -> Ranges:
    """(min, next) of every queue of ``topics``, as they all were at one moment (the
    queues of a routed topic in every broker group of its route, each read from its
    group's primary).

    A transaction's messages become consumable together (one index write), but reading
    the queues takes several requests. So the ranges are read in rounds until two rounds
    in a row agree: each queue then kept its value from its read in the first round to
    its read in the second, and every first-round read comes before every second-round
    read, so at the moment between the two rounds every queue had exactly those values.
    After :data:`SNAPSHOT_ROUNDS` rounds that still moved (a busy topic) the last round is
    taken; then a transaction whose commit fell inside that round may be split between
    two micro-batches (each of its messages is still read exactly once). A transaction
    lives in one broker group (docs/cluster.md), so the rule holds per group too."""
    queues = clients.queues(topics)  # the routes, read once per snapshot
    previous = _ranges_once(clients, queues)
    for _ in range(SNAPSHOT_ROUNDS - 1):
        current = _ranges_once(clients, queues)
        if current == previous:
            return current
        previous = current
    logger.info("queue ends of %s still moved after %d rounds; taking the last one",
                ",".join(topics), SNAPSHOT_ROUNDS)
    return previous


def resolve(clients: GroupClients, topics: Sequence[str], position: Position,
            ranges: Ranges) -> Offsets:
    """``position`` as an offset for every queue, given the queues' current ``ranges``."""
    out: Offsets = {t: {} for t in topics}
    named = {(t, q) for t, qs in position.queues.items() for q in qs}
    unknown = named - set(ranges)
    if unknown:
        t, q = sorted(unknown)[0]
        raise InvalidArgument(f"queue {q} of topic {t!r} does not exist: the topic's queues "
                              f"are {clients.describe(t)}")
    for (t, q), (lo, hi) in ranges.items():
        if position.kind == "earliest":
            off = lo
        elif position.kind == "latest":
            off = hi
        elif position.kind == "timestamp":
            group, local = split_key(q)
            off = clients.offset_for_time(t, group, local, position.timestamp_ms)
        else:
            off = position.queues.get(t, {}).get(q, position.default)
            off = lo if off == EARLIEST else hi if off == LATEST else off
            if off > hi:
                raise InvalidArgument(f"offset {off} of queue {q} of topic {t!r} is past the "
                                      f"queue's end ({hi}): give an offset in {lo} .. {hi}")
        out[t][q] = off
    return out


def cap(start: Offsets, end: Offsets, max_messages: int) -> Offsets:
    """``end``, moved back so that at most ``max_messages`` messages lie between ``start``
    and it, shared fairly: each queue with messages waiting gets an equal share, and what
    a queue with fewer waiting leaves goes to the others."""
    lags = {(t, q): end[t][q] - start.get(t, {}).get(q, 0)
            for t in end for q in end[t]}
    waiting = sorted((lag, tq) for tq, lag in lags.items() if lag > 0)
    out = {t: dict(qs) for t, qs in end.items()}
    budget = max_messages
    for i, (lag, (t, q)) in enumerate(waiting):
        share = max(1, budget // (len(waiting) - i)) if budget > 0 else 0
        take = min(lag, share)
        budget -= take
        out[t][q] = start.get(t, {}).get(q, 0) + take
    return out


def count(start: Offsets, end: Offsets) -> int:
    """Messages between two offsets (retention may have deleted some of them)."""
    return sum(max(0, off - start.get(t, {}).get(q, 0)) for t in end for q, off in end[t].items())
