"""Scheduled delivery: storing a message as a TIMER record (durable at once), and the timer
service that, once a timer is due, appends the message to its topic.

The pending timers are index tables derived from the log (``timers``, ``timeroff``), so a
crash or an index rebuild loses none. The service appends a MESSAGE whose ``ref_offset``
names the TIMER; indexing that MESSAGE removes the timer, in the same LMDB transaction that
makes the message consumable. Only flushed records are indexed, so a timer is delivered
exactly once: a MESSAGE a crash lost was never visible, and its timer is still pending.

The service thread looks for timers due by now (one LMDB cursor read), delivers up to
``timer_batch`` of them in one group commit and waits until they are indexed before it looks
again, so it never delivers a timer twice. Between rounds it sleeps until the earliest
pending timer is due, or until the index adds a timer (the dispatcher's
``on_timers_added``), whichever comes first, and at most ``IDLE_RECHECK_S``: due times are
wall-clock and the sleep is not, so a stepped clock delays a delivery by at most that. Two
looks are at least ``timer_poll_ms`` apart (timers due within it go out together). An idle
server's timer thread therefore wakes once per ``IDLE_RECHECK_S``, not per
``timer_poll_ms``.

Retention **relocates** pending timers out of a segment it is about to delete: a new TIMER
at the log head whose ``ref_offset`` names the old one (indexing it moves the pending
timer), under the same lock as a delivery round, so a timer is either delivered or moved,
never both. A crash leaves the old or the new one pending, never both.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from fmq.config import BrokerConfig
from fmq.engine.queues import Queues, check_messages
from fmq.errors import BrokerClosed, FMQError, IndexUnavailable, InvalidArgument
from fmq.index.dispatcher import Dispatcher
from fmq.index.store import IndexStore
from fmq.log.log import Log
from fmq.log.placement import now_ms, read_record, reserve_segments
from fmq.log.record import NONE, Record, RecordType, check_fits, encoded_length
from fmq.message import MAX_OFFSET, Message, ScheduledSend, check_message
from fmq.threadname import name_os_thread

logger = logging.getLogger("fmq.timers")

#: Called with the (topic, queue id) pairs that got messages, once they are consumable.
Delivered = Callable[[set[tuple[str, int]]], None]
#: The longest the service sleeps without a due timer (see the module docstring).
IDLE_RECHECK_S = 5.0


def check_deliver_at(deliver_at: object) -> int:
    """A delivery time: ms since the Unix epoch, 0..2^63-1."""
    if (not isinstance(deliver_at, int) or isinstance(deliver_at, bool)
            or not 0 <= deliver_at <= MAX_OFFSET):
        raise InvalidArgument(f"deliver_at must be milliseconds since the Unix epoch "
                              f"(0..{MAX_OFFSET}), got {deliver_at!r}")
    return deliver_at


class Timers:
    """Placing TIMER records, the timer service thread, and its counters."""

    def __init__(self, config: BrokerConfig, log_: Log, index: IndexStore,
                 dispatcher: Dispatcher, queues: Queues, max_record_size: int,
                 admit: Callable[[], None], check_open: Callable[[], None]) -> None:
        self.config = config
        self.log = log_
        self.index = index
        self.dispatcher = dispatcher
        self.queues = queues
        self.max_record_size = max_record_size
        self._admit = admit
        self._check_open = check_open
        #: Called after each delivery round (the server wakes the long polls of those queues).
        self.on_delivered: Delivered | None = None
        self.delivered = 0  # timers delivered since the broker opened
        self.relocations = 0  # pending timers retention moved to the log head
        self.late_ms_max = 0  # the latest delivery seen (due time to placement)
        self._delivering = threading.Lock()  # one delivery round at a time
        self._stop = threading.Event()
        #: Set when the index adds a timer, or to stop: ends the service's sleep.
        self._wake = threading.Event()
        #: How many times the service thread looked for due timers (an idle one rarely does).
        self.wakeups = 0
        dispatcher.on_timers_added = self._wake.set
        self._thread = threading.Thread(target=self._run, name="fmq-timers", daemon=True)

    # ---------------------------------------------------------------- scheduling

    def schedule(self, messages: Sequence[Message], deliver_at: int) -> list[ScheduledSend]:
        """Store ``messages`` durably now; each becomes consumable in its topic at
        ``deliver_at`` (ms since the Unix epoch; a past time means at once)."""
        results, end = self.place(messages, deliver_at)
        self.log.wait_durable(end, sync=self.config.flush_mode == "sync")
        return results

    def schedule_internal(self, messages: Sequence[Message], deliver_at: int
                          ) -> list[ScheduledSend]:
        """:meth:`schedule` for the broker's own messages (retries, dead letters), which
        may go to internal topics."""
        results, end = self.place(messages, deliver_at, internal=True)
        self.log.wait_durable(end, sync=self.config.flush_mode == "sync")
        return results

    def place(self, messages: Sequence[Message], deliver_at: int, *, internal: bool = False,
              checked: bool = False) -> tuple[list[ScheduledSend], int]:
        """Place one TIMER record per message (all or none), to be delivered at
        ``deliver_at``; returns the results and the log offset they end at (durable once
        ``log.wait_durable`` of it returns). ``internal``: the broker's own writes (retries)
        may target internal topics."""
        self._check_open()
        check_deliver_at(deliver_at)
        if not checked:
            if internal:
                for m in messages:
                    check_message(m, self.config.max_message_size, self.queues.queue_count,
                                  internal=True)
                    check_fits(m, self.config.segment_size)
            else:
                check_messages(messages, self.config, self.queues)
        if not messages:
            return [], 0
        self._admit()
        store_time = now_ms()
        results = []
        with self.log.lock:
            reserve_segments(self.log, messages)
            for m in messages:
                rec = Record(RecordType.TIMER, store_time=store_time,
                             queue_id=NONE if m.queue_id is None else m.queue_id,
                             queue_offset=deliver_at, topic=m.topic, key=m.key or None,
                             tags=m.tags or None, properties=m.properties, body=bytes(m.body))
                self.log.append_locked(rec)
                results.append(ScheduledSend(rec.log_offset, deliver_at))
            end = self.log.next_offset
        return results, end

    def relocate_before(self, offset: int) -> int:
        """Rewrite every pending timer stored before log offset ``offset`` at the log head
        (retention deletes the segments below it), ``timer_batch`` per group commit.
        Returns how many moved."""
        moved = 0
        while True:
            with self._delivering:
                old = self.index.timers.stored_before(offset, self.config.timer_batch)
                if not old:
                    return moved
                self._append_and_index([read_record(self.log, o, size, self.max_record_size)
                                        for o, size in old], self._relocated)
            moved += len(old)
            self.relocations += len(old)

    @staticmethod
    def _relocated(timer: Record) -> Record:
        """The copy of TIMER ``timer`` that replaces it (see the module docstring)."""
        return Record(RecordType.TIMER, store_time=timer.store_time, queue_id=timer.queue_id,
                      queue_offset=timer.queue_offset, ref_offset=timer.log_offset,
                      ref_size=timer.size, topic=timer.topic, key=timer.key, tags=timer.tags,
                      properties=timer.properties, body=bytes(timer.body))

    def _append_and_index(self, timers: list[Record], make: Callable[[Record], Record]) -> None:
        """Append ``make(timer)`` for each TIMER (``make`` runs with the log lock held),
        then wait until they are durable and indexed: until indexed, the old timers still
        look pending, so the caller holds the delivery lock throughout."""
        with self.log.lock:
            self.log.reserve_locked([encoded_length(t) for t in timers])
            for timer in timers:
                self.log.append_locked(make(timer))
            end = self.log.next_offset
        self.log.wait_durable(end, sync=self.config.flush_mode == "sync")
        while not self.dispatcher.wait_applied(end, 1.0):
            if self._stop.is_set() or self.dispatcher.error is not None:
                raise IndexUnavailable("the index stopped before the timers written were "
                                       "indexed; they are delivered once it runs again")

    def pending(self) -> int:
        """Timers waiting for their time."""
        return self.index.timers.summary()["pending"]

    # ---------------------------------------------------------------- the service

    def start(self) -> Timers:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        name_os_thread()
        poll = self.config.timer_poll_ms / 1000.0
        failures = 0
        while not self._stop.is_set():
            # Cleared before the index is read, so a timer indexed after the read still
            # ends the sleep below.
            self._wake.clear()
            self.wakeups += 1
            looked = time.monotonic()
            try:
                delivered = self.deliver_due()
                failures = 0
            except BrokerClosed:
                return
            except Exception as exc:  # noqa: BLE001 - a bug must not end scheduled delivery
                # Retried after a back-off that doubles up to a second, logged the first
                # time and then once in 64, so a lasting failure cannot flood the log.
                if failures % 64 == 0:
                    logger.warning("timer delivery failed (%d times in a row): %s; retrying",
                                   failures + 1, exc, exc_info=not isinstance(exc, FMQError))
                failures += 1
                self._stop.wait(min(1.0, poll * 2 ** min(failures, 10)))
                continue
            if delivered < self.config.timer_batch:  # a full round: more may be due
                self._wake.wait(max(poll, self._sleep_s()))
                # At least timer_poll_ms between two looks, so timers due close together
                # go out in one group commit.
                rest = poll - (time.monotonic() - looked)
                if rest > 0:
                    self._stop.wait(rest)

    def _sleep_s(self) -> float:
        """Seconds until the earliest pending timer is due, at most ``IDLE_RECHECK_S``."""
        try:
            earliest = self.index.timers.due(MAX_OFFSET, 1)
        except Exception:  # noqa: BLE001 - the next round reports what fails
            return self.config.timer_poll_ms / 1000.0
        if not earliest:
            return IDLE_RECHECK_S
        return min(IDLE_RECHECK_S, max(0.0, (earliest[0][0] - now_ms()) / 1000.0))

    def deliver_due(self, now: int | None = None) -> int:
        """Deliver up to ``timer_batch`` timers due by ``now``: append their messages,
        wait until they are durable and indexed. Returns how many."""
        with self._delivering:
            return self._deliver_due(now_ms() if now is None else now)

    def _deliver_due(self, now: int) -> int:
        due = self.index.timers.due(now, self.config.timer_batch)
        if not due:
            return 0
        timers = [read_record(self.log, offset, size, self.max_record_size)
                  for _due, offset, size in due]
        touched: set[tuple[str, int]] = set()
        store_time = now_ms()

        def delivery(timer: Record) -> Record:  # called with the log lock held
            qid = timer.queue_id
            if not 0 <= qid < self.queues.queue_count(timer.topic):
                qid = self.queues.pick_queue(Message(timer.topic, b"", key=timer.key))
            qoff = self.queues.next_offset(timer.topic, qid)
            self.queues.advance(timer.topic, qid, qoff, len(timer.body))
            touched.add((timer.topic, qid))
            return Record(RecordType.MESSAGE, store_time=store_time, queue_id=qid,
                          queue_offset=qoff, ref_offset=timer.log_offset, ref_size=timer.size,
                          topic=timer.topic, key=timer.key, tags=timer.tags,
                          properties=timer.properties, body=bytes(timer.body))

        self._append_and_index(timers, delivery)
        self.delivered += len(timers)
        self.late_ms_max = max(self.late_ms_max, store_time - due[0][0])
        if self.on_delivered is not None:
            self.on_delivered(touched)
        return len(timers)
