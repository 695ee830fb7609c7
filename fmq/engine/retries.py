"""Retries and dead letters of consumer groups, built on scheduled delivery.

A consumer of group G that fails a message (``nack``) hands it back: the broker stores a
copy as a TIMER for G's retry topic ``%RETRY%G`` (which G's consumers read besides their
own topics), due after the back-off of its attempt (``retry_delays``). Each copy carries
its count of redeliveries (``%RECONSUME_TIMES``) and where it came from; after
``max_reconsume_times`` redeliveries the next failure stores it in G's dead-letter topic
``%DLQ%G`` instead. Other groups read the original topic at their own offsets, so they
never see G's retries. Everything here is a record in the one log: recovery, an index
rebuild and replication derive it like any message.

Redriving sends G's dead letters back to ``%RETRY%G`` (due at once, their count reset).
How far G's dead-letter topic was redriven is G's own committed offset in it (G never
consumes it otherwise), so it shows in ``fmq groups``. A redrive of G runs alone (one lock
per group): a second one waits, then starts where the first stopped, so concurrent redrives
copy each dead letter once. A crash between a batch's copies and that commit redrives that
batch (at most 256 dead letters) again: at least once, like every delivery.
"""

from __future__ import annotations

import threading
from typing import Any

from fmq.errors import InvalidArgument
from fmq.log.placement import now_ms
from fmq.message import (
    DLQ_PREFIX,
    ORIGIN_OFFSET,
    ORIGIN_QUEUE,
    ORIGIN_TOPIC,
    RECONSUME_TIMES,
    RETRY_PREFIX,
    Message,
    StoredMessage,
    check_name,
    dlq_topic,
    retry_topic,
)

__all__ = ["DLQ_PREFIX", "ORIGIN_TOPIC", "RECONSUME_TIMES", "RETRY_PREFIX", "GroupLocks",
           "dead_letters", "delivery_stats", "dlq_topic", "nack", "redrive", "retry_topic"]

#: Dead letters read and copied back per batch (one group commit, then one offset commit).
REDRIVE_BATCH = 256


class GroupLocks:
    """One lock per consumer group (a broker's ``redrive_locks``): two redrives of a group
    at once would both copy the dead letters neither had committed yet."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def of(self, group: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(group, threading.Lock())


def _copy(m: StoredMessage, topic: str, reconsume_times: int) -> Message:
    """``m`` as a new message of ``topic``, remembering where it was first stored."""
    props = dict(m.properties or {})
    props.setdefault(ORIGIN_TOPIC, m.topic)
    props.setdefault(ORIGIN_QUEUE, str(m.queue_id))
    props.setdefault(ORIGIN_OFFSET, str(m.queue_offset))
    props[RECONSUME_TIMES] = str(reconsume_times)
    return Message(topic, m.body, key=m.key, tags=m.tags, properties=props)


def stored_message(broker: Any, topic: str, queue_id: int, queue_offset: int) -> StoredMessage:
    """The consumable message at (topic, queue id, queue offset), or InvalidArgument."""
    found = broker.pull(topic, queue_id, queue_offset, 1)
    if not found or found[0].queue_offset != queue_offset:
        raise InvalidArgument(f"no message at {topic}/{queue_id}/{queue_offset} (not stored "
                              f"yet, or deleted by retention); nack a message you received")
    return found[0]


def nack(broker: Any, group: str, topic: str, queue_id: int, queue_offset: int,
         delay_ms: int | None = None) -> tuple[int, bool]:
    """``group`` failed the message at (topic, queue id, queue offset): store it for a
    redelivery to ``group`` after ``delay_ms`` (None: the back-off level of this attempt),
    or in the group's dead-letter topic once it was redelivered ``max_reconsume_times``.
    Returns (its redeliveries so far, whether it went to the dead-letter topic); returns
    once the copy is durable."""
    check_name(group, "group", allow_none=False)
    if delay_ms is not None and (not isinstance(delay_ms, int) or isinstance(delay_ms, bool)
                                 or delay_ms < 0):
        raise InvalidArgument(f"delay must be a number of milliseconds >= 0, got {delay_ms!r}")
    m = stored_message(broker, topic, queue_id, queue_offset)
    done = m.reconsume_times
    cfg = broker.config
    if done >= cfg.max_reconsume_times:
        broker.timers.schedule_internal([_copy(m, dlq_topic(group), done)], 0)
        return done, True
    levels = cfg.retry_delays_ms
    delay = levels[min(done, len(levels) - 1)] if delay_ms is None else delay_ms
    broker.timers.schedule_internal([_copy(m, retry_topic(group), done + 1)],
                                    now_ms() + delay)
    return done + 1, False


def dead_letter_ranges(broker: Any, group: str) -> list[tuple[int, int, int]]:
    """Per queue of the group's dead-letter topic: (queue id, first not redriven, next)."""
    topic = dlq_topic(group)
    out = []
    for qid in range(broker.queue_count(topic)):
        lo, hi = broker.queue_range(topic, qid)
        done = broker.committed_offset(group, topic, qid)
        out.append((qid, max(lo, done or 0), hi))
    return out


def oldest_dead_letter_ms(broker: Any, group: str) -> int | None:
    """When the oldest dead letter of ``group`` not yet redriven was stored (ms since the
    Unix epoch; None: there is none)."""
    topic, stored = dlq_topic(group), []
    for qid, start, end in dead_letter_ranges(broker, group):
        t = broker.index.store_time(topic, qid, start) if start < end else None
        if t is not None:
            stored.append(t)
    return min(stored) if stored else None


def dead_letters(broker: Any, group: str, limit: int = 1000) -> list[StoredMessage]:
    """Up to ``limit`` of the group's dead letters not yet redriven, queue by queue."""
    out: list[StoredMessage] = []
    for qid, start, end in dead_letter_ranges(broker, group):
        while start < end and len(out) < limit:
            got = broker.pull(dlq_topic(group), qid, start, min(256, limit - len(out)))
            if not got:
                break
            out += got
            start = got[-1].queue_offset + 1
    return out


def redrive(broker: Any, group: str, max_messages: int = 10_000) -> int:
    """Send up to ``max_messages`` of the group's dead letters back to its retry topic
    (consumable at once, redeliveries counted from 0). Returns how many. A concurrent
    redrive of the same group waits for this one, then takes what is left."""
    check_name(group, "group", allow_none=False)
    moved = 0
    with broker.redrive_locks.of(group):
        for qid, start, end in dead_letter_ranges(broker, group):
            while start < end and moved < max_messages:
                got = broker.pull(dlq_topic(group), qid, start,
                                  min(REDRIVE_BATCH, max_messages - moved))
                if not got:
                    break
                broker.timers.schedule_internal([_copy(m, retry_topic(group), 0)
                                                 for m in got], 0)
                start = got[-1].queue_offset + 1
                broker.commit_offset(group, dlq_topic(group), qid, start)
                moved += len(got)
    return moved


def group_counts(broker: Any, timers_by_topic: dict[str, int]) -> dict[str, dict[str, int]]:
    """Per group with retries or dead letters: retries pending (timers for its retry
    topic), retries ready in its retry topic's queues, dead letters not redriven."""
    groups = {t[len(RETRY_PREFIX):] for t in timers_by_topic if t.startswith(RETRY_PREFIX)}
    groups |= {t[len(DLQ_PREFIX):] for t, _q in broker.index.all_queues()
               if t.startswith(DLQ_PREFIX)}
    return {g: {"retries_pending": timers_by_topic.get(retry_topic(g), 0),
                "dead_letters": sum(end - start for _q, start, end
                                    in dead_letter_ranges(broker, g))}
            for g in sorted(groups)}


def delivery_stats(broker: Any) -> dict[str, Any]:
    """Timers and per-group retries for ``fmq stats`` and the metrics: pending timers, per
    destination topic too, timers delivered since the broker opened, how often the timer
    service looked for due timers, and per group its retries pending and dead letters."""
    by_topic = broker.index.timers.by_topic()
    return {"timers_pending": sum(by_topic.values()), "timers_pending_by_topic": by_topic,
            "timers_delivered": broker.timers.delivered,
            "timer_relocations": broker.timers.relocations,
            "timer_wakeups": broker.timers.wakeups,
            "groups": group_counts(broker, by_topic)}
