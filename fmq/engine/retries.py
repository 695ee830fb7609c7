"""Scheduled delivery, and the retries and dead letters of consumer groups built on it
(``Broker.deliveries``).

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
per consumer group): a second one waits, then starts where the first stopped, so concurrent redrives
copy each dead letter once. A crash between a batch's copies and that commit redrives that
batch (at most 256 dead letters) again: at least once, like every delivery.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from fmq.config import BrokerConfig
from fmq.engine.offsets import ConsumerOffsets
from fmq.engine.queues import Queues
from fmq.engine.reads import Reader
from fmq.engine.timers import Timers
from fmq.errors import InvalidArgument
from fmq.index.store import IndexStore
from fmq.log.placement import now_ms
from fmq.message import (
    DLQ_PREFIX,
    ORIGIN_OFFSET,
    ORIGIN_QUEUE,
    ORIGIN_TOPIC,
    RECONSUME_TIMES,
    RETRY_PREFIX,
    Message,
    ScheduledSend,
    StoredMessage,
    check_name,
    dlq_topic,
    retry_topic,
)

__all__ = ["DLQ_PREFIX", "ORIGIN_TOPIC", "RECONSUME_TIMES", "RETRY_PREFIX", "Deliveries",
           "dlq_topic", "retry_topic"]

#: Dead letters read and copied back per batch (one group commit, then one offset commit).
REDRIVE_BATCH = 256


class GroupLocks:
    """One lock per consumer group: two redrives of a group at once would both copy the
    dead letters neither had committed yet."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def of(self, consumer_group: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(consumer_group, threading.Lock())


def _copy(m: StoredMessage, topic: str, reconsume_times: int) -> Message:
    """``m`` as a new message of ``topic``, remembering where it was first stored."""
    props = dict(m.properties or {})
    props.setdefault(ORIGIN_TOPIC, m.topic)
    props.setdefault(ORIGIN_QUEUE, str(m.queue_id))
    props.setdefault(ORIGIN_OFFSET, str(m.queue_offset))
    props[RECONSUME_TIMES] = str(reconsume_times)
    return Message(topic, m.body, key=m.key, tags=m.tags, properties=props)


class Deliveries:
    """Scheduled sends (SEND_AT), nack, redrive and dead letters of one open broker."""

    def __init__(self, *, config: BrokerConfig, timers: Timers, reads: Reader,
                 offsets: ConsumerOffsets, queues: Queues, index: IndexStore) -> None:
        self._config = config
        self._timers = timers
        self._reads = reads
        self._offsets = offsets
        self._queues = queues
        self._index = index
        self._redrive_locks = GroupLocks()

    def schedule(self, messages: Sequence[Message], due_ms: int) -> list[ScheduledSend]:
        """Store ``messages`` for delivery at ``due_ms`` (TIMER records; SEND_AT); see
        :meth:`fmq.engine.timers.Timers.schedule`."""
        return self._timers.schedule(messages, due_ms)

    def stored_message(self, topic: str, queue_id: int, queue_offset: int) -> StoredMessage:
        """The consumable message at (topic, queue id, queue offset), or InvalidArgument."""
        found = self._reads.pull(topic, queue_id, queue_offset, 1)
        if not found or found[0].queue_offset != queue_offset:
            raise InvalidArgument(f"no message at {topic}/{queue_id}/{queue_offset} (not "
                                  f"stored yet, or deleted by retention); nack a message you "
                                  f"received")
        return found[0]

    def nack(self, consumer_group: str, topic: str, queue_id: int, queue_offset: int,
             delay_ms: int | None = None) -> tuple[int, bool]:
        """``consumer_group`` failed the message at (topic, queue id, queue offset): store
        it for a redelivery to the group after ``delay_ms`` (None: the back-off level of
        this attempt), or in the group's dead-letter topic once it was redelivered
        ``max_reconsume_times``. Returns (its redeliveries so far, whether it went to the
        dead-letter topic); returns once the copy is durable."""
        check_name(consumer_group, "group", allow_none=False)
        if delay_ms is not None and (not isinstance(delay_ms, int)
                                     or isinstance(delay_ms, bool) or delay_ms < 0):
            raise InvalidArgument(f"delay must be a number of milliseconds >= 0, got "
                                  f"{delay_ms!r}")
        m = self.stored_message(topic, queue_id, queue_offset)
        done = m.reconsume_times
        cfg = self._config
        if done >= cfg.max_reconsume_times:
            self._timers.schedule_internal([_copy(m, dlq_topic(consumer_group), done)], 0)
            return done, True
        levels = cfg.retry_delays_ms
        delay = levels[min(done, len(levels) - 1)] if delay_ms is None else delay_ms
        self._timers.schedule_internal([_copy(m, retry_topic(consumer_group), done + 1)],
                                       now_ms() + delay)
        return done + 1, False

    def dead_letter_ranges(self, consumer_group: str) -> list[tuple[int, int, int]]:
        """Per queue of the group's dead-letter topic: (queue id, first not redriven,
        next)."""
        topic = dlq_topic(consumer_group)
        out = []
        for qid in range(self._queues.queue_count(topic)):
            lo, hi = self._reads.queue_range(topic, qid)
            done = self._reads.committed_offset(consumer_group, topic, qid)
            out.append((qid, max(lo, done or 0), hi))
        return out

    def oldest_dead_letter_ms(self, consumer_group: str) -> int | None:
        """When the oldest dead letter of ``consumer_group`` not yet redriven was stored (ms
        since the Unix epoch; None: there is none)."""
        topic, stored = dlq_topic(consumer_group), []
        for qid, start, end in self.dead_letter_ranges(consumer_group):
            t = self._index.store_time(topic, qid, start) if start < end else None
            if t is not None:
                stored.append(t)
        return min(stored) if stored else None

    def dead_letters(self, consumer_group: str, limit: int = 1000) -> list[StoredMessage]:
        """Up to ``limit`` of the group's dead letters not yet redriven, queue by queue."""
        out: list[StoredMessage] = []
        for qid, start, end in self.dead_letter_ranges(consumer_group):
            while start < end and len(out) < limit:
                got = self._reads.pull(dlq_topic(consumer_group), qid, start,
                                       min(256, limit - len(out)))
                if not got:
                    break
                out += got
                start = got[-1].queue_offset + 1
        return out

    def redrive(self, consumer_group: str, max_messages: int = 10_000) -> int:
        """Send up to ``max_messages`` of the group's dead letters back to its retry topic
        (consumable at once, redeliveries counted from 0). Returns how many. A concurrent
        redrive of the same group waits for this one, then takes what is left."""
        check_name(consumer_group, "group", allow_none=False)
        dlq, retry = dlq_topic(consumer_group), retry_topic(consumer_group)
        moved = 0
        with self._redrive_locks.of(consumer_group):
            for qid, start, end in self.dead_letter_ranges(consumer_group):
                while start < end and moved < max_messages:
                    got = self._reads.pull(dlq, qid, start,
                                           min(REDRIVE_BATCH, max_messages - moved))
                    if not got:
                        break
                    self._timers.schedule_internal([_copy(m, retry, 0) for m in got], 0)
                    start = got[-1].queue_offset + 1
                    self._offsets.commit(consumer_group, [(dlq, qid, start)])
                    moved += len(got)
        return moved

    def _group_counts(self, timers_by_topic: dict[str, int]) -> dict[str, dict[str, int]]:
        """Per consumer group with retries or dead letters: retries pending (timers for its
        retry topic), dead letters not redriven."""
        groups = {t[len(RETRY_PREFIX):] for t in timers_by_topic if t.startswith(RETRY_PREFIX)}
        groups |= {t[len(DLQ_PREFIX):] for t, _q in self._index.all_queues()
                   if t.startswith(DLQ_PREFIX)}
        return {g: {"retries_pending": timers_by_topic.get(retry_topic(g), 0),
                    "dead_letters": sum(end - start for _q, start, end
                                        in self.dead_letter_ranges(g))}
                for g in sorted(groups)}

    def stats(self) -> dict[str, Any]:
        """Timers and per-group retries for ``fmq stats`` and the metrics: pending timers,
        per destination topic too, timers delivered since the broker opened, how often the
        timer service looked for due timers, and per consumer group its retries pending and
        dead letters."""
        by_topic = self._index.timers.by_topic()
        timers = self._timers
        return {"timers_pending": sum(by_topic.values()), "timers_pending_by_topic": by_topic,
                "timers_delivered": timers.delivered,
                "timer_relocations": timers.relocations,
                "timer_wakeups": timers.wakeups,
                "groups": self._group_counts(by_topic)}
