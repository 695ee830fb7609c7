"""The dispatcher: applies the *flushed* part of the log to the index.

It never indexes past the durable offset (RocketMQ #8239: indexing unflushed data let
consumers read messages a crash then lost). Each batch of entries and the offset applied up
to go into one LMDB transaction, so a crash leaves the index at a batch boundary and the
redo pass re-applies from the checkpoint idempotently.

Two ways to learn what a flushed record contributes, both through the same pure function
(:func:`~fmq.index.entries.index_items`: queue entries, transaction ends, consumer offsets,
terms, timer changes):

* **hand-off** (normal): the log calls :meth:`Dispatcher.on_append` for every record it
  appends, under its lock, so entries queue up in log order; once a flush covers them they
  are applied. This saves reading and decoding every record a second time.
* **tailing** (fallback): when the backlog exceeds ``max_pending`` entries (the index cannot
  keep up), the hand-off queue is dropped and the dispatcher reads the flushed log from its
  applied offset instead, through :class:`~fmq.log.scanner.LogScanner`, then switches back.

**A failing index write does not stop it.** An error a later attempt can get past (ENOSPC
or EIO on the LMDB file, LMDB out of memory or reader slots, an ``OSError`` reading the
log: :func:`~fmq.index.lmdb_env.is_transient`) is logged once; the dispatcher drops the
hand-off queue, waits with exponential back-off and retries from its applied offset by
reading the flushed log, until a write succeeds. While it is failing,
:attr:`Dispatcher.failing` holds the error and the broker refuses new messages
(acknowledged must keep meaning consumable once indexed). Anything else (a corrupt index
or log record, a bug) stops it for good: :attr:`Dispatcher.error`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from fmq.index.entries import (
    IndexItem,
    Mark,
    QueueEntry,
    TimerChange,
    TimerEntry,
    index_items,
    sort_items,
)
from fmq.index.flushed_scan import index_flushed
from fmq.index.lmdb_env import is_transient
from fmq.index.store import IndexStore
from fmq.log.log import Log
from fmq.log.reader import OpenSegmentSource
from fmq.log.record import Record
from fmq.threadname import name_os_thread

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, log_: Log, index: IndexStore, batch: int, max_record_size: int,
                 start_offset: int, max_pending: int = 200_000, retry_initial: float = 0.05,
                 retry_max: float = 5.0) -> None:
        self.log = log_
        self.max_pending = max_pending
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.linger = 0.001
        self._pending: deque[tuple[int, IndexItem]] = deque()
        self._accepting = True
        self._generation = 0
        self._file_until = start_offset  # below this, entries come from reading the log
        self.index = index
        self.batch = batch
        self.max_record_size = max_record_size
        self._applied = start_offset
        self._cond = threading.Condition()
        self._target = start_offset
        self._stop = False
        self._hurry = False  # someone waits to read what is flushed: skip the linger
        #: Set when the dispatcher stopped for good (corruption, a bug): nothing more is indexed.
        self.error: BaseException | None = None
        #: The last error of an index write that is being retried; None once one succeeds.
        self.failing: BaseException | None = None
        #: Index writes retried after a transient error, since the broker opened.
        self.retries = 0
        self._failing_since = 0.0
        self._retries_at_start = 0
        #: Called (dispatcher thread) with the (topic, queue) pairs an index write made
        #: consumable: the server wakes those queues' pull long polls then, when they can
        #: read what woke them (a follower's copied records too).
        self.on_applied: Callable[[set[tuple[str, int]]], None] | None = None
        #: Called (dispatcher thread) after an index write that added pending timers: the
        #: timer service sleeps until its next due timer and must learn of an earlier one.
        self.on_timers_added: Callable[[], None] | None = None
        self._thread = threading.Thread(target=self._run, name="fmq-dispatcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def applied_offset(self) -> int:
        return self._applied

    def notify_flushed(self, offset: int) -> None:
        """The log calls this after each flush (log.on_flushed)."""
        with self._cond:
            if offset > self._target:
                self._target = offset
                self._cond.notify_all()

    def on_append(self, record: Record) -> None:
        """The log calls this for every appended record, with the log lock held."""
        if not self._accepting:
            return
        items = index_items(record)
        if not items:
            return
        pending = self._pending
        end = record.log_offset + record.size
        for item in items:  # a firing MESSAGE has two
            pending.append((end, item))
        self._check_backlog()

    def on_append_entries(self, placed: list[tuple[int, QueueEntry]]) -> None:
        """The log calls this for the records of a batch of plain sends (log lock held):
        ``(end offset, queue entry)`` each, the items :meth:`on_append` would queue."""
        if not self._accepting:
            return
        self._pending.extend(placed)
        self._check_backlog()

    def _check_backlog(self) -> None:
        """Past ``max_pending`` queued items the index lags: drop the hand-off and read the
        log instead (log lock held)."""
        if len(self._pending) > self.max_pending:
            self._accepting = False
            self._generation += 1
            self._pending.clear()

    def hurry(self) -> None:
        """Apply what is flushed without lingering: a caller (an offset commit) answers
        only once the index has it."""
        with self._cond:
            self._hurry = True
            self._cond.notify_all()

    def wait_running(self) -> None:
        """The thread runs from :meth:`start` on (the indexer process may not yet)."""

    def wait_applied(self, offset: int, timeout: float | None = None) -> bool:
        """Block until the index covers the log below ``offset``."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._applied >= offset or self.error is not None or self._stop,
                timeout) and self._applied >= offset

    def _run(self) -> None:
        name_os_thread()
        try:
            delay = self.retry_initial
            while True:
                with self._cond:
                    while self._target <= self._applied and not self._stop:
                        self._cond.wait()
                    if self._stop and self._target <= self._applied:
                        return
                if self.linger and not self._stop and self.failing is None:
                    # Gather a few flushes per LMDB transaction: each one applied alone
                    # costs the writers more in GIL hand-offs than it costs consumers to
                    # see messages a millisecond later.
                    with self._cond:
                        self._cond.wait_for(lambda: self._hurry or self._stop, self.linger)
                with self._cond:
                    self._hurry = False
                    target = self._target
                try:
                    self._dispatch(target)
                except BaseException as exc:
                    if not is_transient(exc):
                        raise
                    if not self._back_off(exc, delay):
                        return
                    delay = min(delay * 2, self.retry_max)
                    continue
                delay = self.retry_initial
                if self.failing is not None:
                    self._recovered()
        except BaseException as exc:  # the broker reports it in stats and refuses sends
            log.exception("dispatcher stopped: %s", exc)
            with self._cond:
                self.error = exc
                self._cond.notify_all()

    def _back_off(self, exc: BaseException, delay: float) -> bool:
        """After a transient failure: wait ``delay`` before the next attempt. False when the
        dispatcher is stopping instead."""
        if self._stop:  # closing: the next open's recovery indexes the rest from the log
            log.warning("dispatcher stopping with the index failing (%s); the next open "
                        "indexes the rest from the log", exc)
            return False
        self._note_failure(exc, delay)  # from now on the broker refuses new messages
        self._read_log_from_applied()
        with self._cond:
            self._cond.wait_for(lambda: self._stop, delay)
        return True

    def _read_log_from_applied(self) -> None:
        """After a failed write the hand-off queue no longer matches the applied offset (the
        failed batch was taken from it): read the flushed log instead until caught up."""
        with self.log.lock:
            self._accepting = False
            self._generation += 1
            self._pending.clear()

    def _note_failure(self, exc: BaseException, delay: float) -> None:
        with self._cond:
            if self.failing is None:  # log once per episode, not once per retry
                self._failing_since = time.monotonic()
                self._retries_at_start = self.retries
                log.error("index write failed: %s; new messages are refused until it works "
                          "again; retrying with back-off up to %.1f s (free disk space or fix "
                          "the disk)", exc, self.retry_max)
            else:
                log.debug("index write failed again: %s; next retry in %.2f s", exc, delay)
            self.failing = exc
            self.retries += 1

    def _recovered(self) -> None:
        with self._cond:
            log.warning("index writes work again after %d retries (%.1f s); indexed up to %d",
                        self.retries - self._retries_at_start,
                        time.monotonic() - self._failing_since, self._applied)
            self.failing = None
            self._cond.notify_all()

    def _dispatch(self, target: int) -> None:
        generation = self._generation
        if self._accepting and self._applied >= self._file_until:
            entries: list[QueueEntry] = []
            ends: list[Mark] = []
            timers: list[TimerChange] = []
            pending = self._pending
            while True:
                try:
                    end, item = pending[0]
                except IndexError:
                    break
                if end > target:
                    break
                pending.popleft()
                sort_items((item,), entries, ends, timers)
                if (len(entries) + len(ends) + len(timers) >= self.batch
                        and generation == self._generation
                        and (not pending or pending[0][0] != end)):  # a record's items together
                    self._apply(entries, end, ends, timers)
                    entries, ends, timers = [], [], []
            if generation == self._generation:
                self._apply(entries, target, ends, timers)
                return
            # The hand-off overflowed while we took from it: read the log instead.
        self._catch_up(target)
        pending = self._pending
        while pending and pending[0][0] <= self._applied:
            pending.popleft()
        if not self._accepting:
            with self.log.lock:  # from the next append on, the hand-off is complete again
                pending.clear()
                self._file_until = self.log.next_offset
                self._generation += 1
                self._accepting = True

    def _catch_up(self, target: int) -> None:
        """Index the flushed log from the applied offset up to ``target``, read through the
        log scanner over the log's open segments."""
        self.log.segment_for(self._applied)  # OffsetOutOfRange when retention deleted it
        with self.log.lock:
            segments = list(self.log.segments)
        index_flushed(source=OpenSegmentSource(segments), start=self._applied, target=target,
                      max_record_size=self.max_record_size, batch=self.batch,
                      segment_end=lambda offset: self.log.segment_for(offset).end,
                      apply=self._apply)

    def _apply(self, entries: list[QueueEntry], applied: int, ends: list[Mark],
               timers: list[TimerChange]) -> None:
        self.index.apply(entries, applied, ends, timers)
        with self._cond:
            self._applied = applied
            self._cond.notify_all()
        on_applied = self.on_applied
        if on_applied is not None and entries:
            on_applied({(e.topic, e.queue_id) for e in entries})
        on_timers_added = self.on_timers_added
        if on_timers_added is not None and any(type(t) is TimerEntry for t in timers):
            on_timers_added()

    def stop(self) -> None:
        """Finish applying what is flushed, then stop the thread. While index writes fail it
        stops after one more attempt: the next open's recovery indexes the rest."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()
