"""The broker's side of the indexer process (``index_writer = "process"``): an object with
the :class:`~fmq.index.dispatcher.Dispatcher`'s interface, so the engine's calls do not
change, whose index writes happen in :mod:`fmq.index.indexer_process`.

The log's flush callback writes the flushed end to the child's command pipe (9 bytes per
flush, never per message, non-blocking: a child that lags gets the newest end with its next
report). One reader thread takes the child's reports (one per index transaction): it
advances :attr:`applied_offset`, wakes :meth:`wait_applied` and calls :attr:`on_applied`
with the queues made consumable, as the dispatcher thread does. The thread is woken once
per index transaction, not per message, and holds the interpreter lock only to read a line.

If the child dies (killed, out of memory), the reader sees its pipe end, logs it and starts
a new one, which resumes from the applied offset stored in LMDB. The restarts back off: a
child that dies within ``retry_max`` seconds of its start is followed by the next one
after ``retry_initial`` seconds, doubled for each such quick death in a row up to
``retry_max`` (a child that keeps dying costs an interpreter's start per ``retry_max``
seconds, not a core); one that ran longer is followed after ``retry_initial``. After
``max_restarts`` deaths in a row without progress it gives up: :attr:`error` is set and
the broker refuses new messages, as when the dispatcher thread stops.

A close never waits on the child (:meth:`ProcessDispatcher.stop`): it kills it and indexes
the rest of the flushed log in the broker, as the dispatcher thread's catch-up does.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import ClassVar

from fmq.errors import IndexCorrupt, IndexUnavailable
from fmq.index import writer_wire as wire
from fmq.index.entries import Mark, QueueEntry, TimerChange
from fmq.index.flushed_scan import index_flushed
from fmq.index.indexer_process import file_id
from fmq.index.lmdb_env import is_transient
from fmq.index.store import IndexStore
from fmq.log.log import Log
from fmq.log.reader import OpenSegmentSource
from fmq.log.record import Record
from fmq.threadname import name_os_thread

log = logging.getLogger(__name__)


class ProcessDispatcher:
    #: The module run as the indexer process (a crash test runs one that kills itself at
    #: chosen points, tests/workloads/crashing_indexer.py).
    indexer_module: ClassVar[str] = "fmq.index.indexer_process"

    def __init__(self, *, log_: Log, index: IndexStore, index_path: str, log_dir: str,
                 map_size: int, batch: int, max_record_size: int, start_offset: int,
                 retry_initial: float = 0.05, retry_max: float = 5.0,
                 max_restarts: int = 5) -> None:
        self._log = log_
        self._index = index
        index.tails.stop_keeping()  # the child writes the index, not this process
        self._batch = batch
        self._max_record_size = max_record_size
        self._args = [sys.executable, "-m", self.indexer_module,
                      "--index", index_path, "--log", log_dir, "--map-size", str(map_size),
                      "--batch", str(batch), "--max-record-size", str(max_record_size),
                      "--retry-initial", str(retry_initial), "--retry-max", str(retry_max),
                      "--index-file", file_id(index_path)]
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self.max_restarts = max_restarts
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self._applied = start_offset
        self._target = start_offset
        self._sent = start_offset
        self._stop = False
        self._running = False  # the first child reported
        self._spawned = threading.Event()
        self._spawn_error: BaseException | None = None
        self._child: subprocess.Popen | None = None
        #: Set when index writes stopped for good: nothing more is indexed.
        self.error: BaseException | None = None
        #: The last error of an index write that is being retried; None once one succeeds.
        self.failing: BaseException | None = None
        #: Index writes retried after a transient error, since the broker opened.
        self.retries = 0
        #: Indexer processes started again after one died.
        self.restarts = 0
        #: The pause before each restart so far, in seconds (the back-off).
        self.restart_delays: list[float] = []
        #: Called (reader thread) with the (topic, queue) pairs an index write made consumable.
        self.on_applied: Callable[[set[tuple[str, int]]], None] | None = None
        #: Called (reader thread) after an index write that added pending timers.
        self.on_timers_added: Callable[[], None] | None = None
        # A name of 15 bytes at most: the operating system keeps no more.
        self._thread = threading.Thread(target=self._run, name="fmq-idx-reports",
                                        daemon=True)

    def start(self) -> None:
        """Start the reader thread, which starts the child: the child dies with the thread
        that started it (``--parent``), and the reader thread lives as long as this object."""
        self._thread.start()
        self._spawned.wait()
        if self._spawn_error is not None:  # e.g. no file descriptor left for its pipes
            self._thread.join()
            raise self._spawn_error

    def wait_running(self, timeout: float = 60.0) -> None:
        """Return once the child runs (its first report), at most ``timeout`` seconds after
        the first call; the broker calls it before placing a new message. Writing before
        would let the log run ahead of an index nobody writes yet (an interpreter's start
        takes longer than many sends) and, on a filling disk, take the space the index
        needs. An open that writes nothing does not wait."""
        if self._running:
            return
        with self._cond:
            if not self._cond.wait_for(
                    lambda: self._running or self.error is not None or self._stop, timeout):
                log.warning("the indexer process has not started in %.0f s; new messages "
                            "are taken without waiting for it", timeout)
                self._running = True  # waited once: the lag limit guards the rest

    @property
    def applied_offset(self) -> int:
        return self._applied

    @property
    def pid(self) -> int | None:
        """The indexer process's id (None before it starts)."""
        child = self._child
        return None if child is None else child.pid

    def notify_flushed(self, offset: int) -> None:
        """The log calls this after each flush (log.on_flushed)."""
        with self._cond:
            if offset <= self._target:
                return
            self._target = offset
        self._send_target()

    def on_append(self, record: Record) -> None:
        """The child reads the flushed records from the segment files itself."""

    def hurry(self) -> None:
        """Apply what is flushed without lingering."""
        self._send(wire.command(wire.HURRY))

    def wait_applied(self, offset: int, timeout: float | None = None) -> bool:
        """Block until the index covers the log below ``offset``."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._applied >= offset or self.error is not None or self._stop,
                timeout) and self._applied >= offset

    # ------------------------------------------------------------------ the child

    def _spawn(self, start: int) -> bool:
        """Start a child indexing from ``start``; False when the broker is closing."""
        with self._send_lock:
            if self._stop:
                return False
            # A session of its own: a Ctrl-C meant for the broker does not kill it first
            # (it dies with this thread: --parent).
            child = subprocess.Popen(self._args + ["--start", str(start),
                                                   "--parent", str(os.getpid())],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     close_fds=True, start_new_session=True)
            os.set_blocking(child.stdin.fileno(), False)
            self._child = child
            self._sent = 0
        self._send_target()
        return True

    def _send_target(self) -> None:
        with self._send_lock:
            target = self._target
            if target <= self._sent:
                return
            if self._write(wire.command(wire.FLUSHED, target)):
                self._sent = target

    def _send(self, command: bytes) -> None:
        with self._send_lock:
            self._write(command)

    def _write(self, command: bytes) -> bool:
        child = self._child
        if child is None or child.stdin.closed:
            return False
        try:
            os.write(child.stdin.fileno(), command)  # 9 bytes: whole or not at all
        except BlockingIOError:  # the child lags: its next report sends the newest end
            return False
        except OSError as exc:  # the child died: the reader thread restarts it
            if exc.errno != errno.EPIPE:
                log.warning("cannot write to the indexer process: %s", exc)
            return False
        return True

    def _run(self) -> None:
        name_os_thread()
        try:
            started = self._spawn(self._applied)
        except BaseException as exc:
            self._spawn_error = exc
            started = False
        finally:
            self._spawned.set()
        if not started:
            return
        deaths = 0  # in a row without progress
        quick = 0  # in a row, each within retry_max seconds of its start
        while True:
            child = self._child
            born = time.monotonic()
            progressed = self._read_reports(child)
            code = child.wait()
            if self._stop or self.error is not None:
                return  # stop() closes the pipes
            child.stdout.close()
            with self._send_lock:
                child.stdin.close()
            deaths = 1 if progressed else deaths + 1
            quick = quick + 1 if time.monotonic() - born < self._retry_max else 1
            log.error("the indexer process (pid %d) ended with status %s; applied up to %d",
                      child.pid, code, self._applied)
            if not self._restart(deaths, quick, code):
                return
            self.restarts += 1

    def _restart(self, deaths: int, quick: int, code: object) -> bool:
        """Start the next child after the back-off (``deaths``: children in a row that died
        without progress, ``quick``: that died young, ``code``: the last one's status);
        False when the broker closes or the deaths are too many."""
        while deaths <= self.max_restarts:
            if not self._pause_before_restart(quick):
                return False
            try:
                return self._spawn(self._applied)
            except OSError as exc:  # no descriptor or memory for it: try again later
                log.error("cannot start the indexer process again: %s", exc)
                code = f"not started: {exc}"
                deaths += 1
                quick += 1
        self._give_up(IndexUnavailable(
            f"the indexer process died {deaths} times in a row (last status {code}); nothing "
            f"more is indexed. See the server log, then restart the broker"))
        return False

    def _pause_before_restart(self, quick: int) -> bool:
        """Wait before starting the next child (``quick``: children in a row that died
        young); False when the broker closes meanwhile."""
        delay = min(self._retry_initial * 2 ** (quick - 1), self._retry_max)
        self.restart_delays.append(delay)
        log.info("starting the indexer process again in %.2f s", delay)
        with self._cond:
            return not self._cond.wait_for(lambda: self._stop, delay)

    def _read_reports(self, child: subprocess.Popen) -> bool:
        """Take the child's reports until its pipe ends; whether it applied anything."""
        progressed = False
        first = True
        for line in child.stdout:
            report = wire.parse_report(line)
            applied = report.get("applied")
            if applied is not None:
                if not first:
                    progressed = True
                first = False
                self._applied_to(applied, report["queues"], report["timers"])
            elif "failing" in report:
                with self._cond:
                    self.retries = report["retries"]
                    self.failing = IndexUnavailable(report["failing"])
            elif "recovered" in report:
                with self._cond:
                    self.failing = None
                    self._cond.notify_all()
            elif "error" in report:
                self._give_up(IndexCorrupt(report["error"]))
        return progressed

    def _applied_to(self, applied: int, queues: list, timers_added: bool) -> None:
        with self._cond:
            self._running = True
            if applied > self._applied:
                self._applied = applied
                # A write succeeded: also after a child that failed died (it never
                # reported "recovered"), its successor's progress ends the refusals.
                self.failing = None
            self._cond.notify_all()
        if self._sent < self._target:  # a command found the pipe full
            self._send_target()
        on_applied = self.on_applied
        if on_applied is not None and queues:
            on_applied({(topic, queue) for topic, queue in queues})
        on_timers_added = self.on_timers_added
        if on_timers_added is not None and timers_added:
            on_timers_added()

    def _give_up(self, exc: BaseException) -> None:
        log.error("index writes stopped: %s", exc)
        with self._cond:
            self.error = exc
            self._cond.notify_all()

    def stop(self) -> None:
        """End the child and the reader thread, then index the rest of the flushed log here.

        The child is killed, not asked to finish: it may be starting (an interpreter's start
        takes longer than most closes), blocked on LMDB's writer lock, stopped, or retrying
        a failing write, and a close must not wait on any of it. A kill loses nothing: LMDB
        survives it and the index is derived from the log. The broker then indexes what is
        flushed beyond the index's applied offset itself, through the same scan, as the
        dispatcher thread's stop does; while index writes fail it stops after that one
        attempt and the next open's recovery indexes the rest."""
        with self._send_lock:
            if self._stop:
                return
            self._stop = True
            child = self._child
        with self._cond:
            self._cond.notify_all()
        if child is not None:
            if child.poll() is None:
                child.kill()
            child.wait()
            with self._send_lock:
                child.stdin.close()
        if self._thread.is_alive():
            self._thread.join()
        if child is not None:
            child.stdout.close()
        if self.error is None:
            self._finish()

    def _finish(self) -> None:
        stored = self._index.applied_offset()  # the child may have written past its last report
        with self._cond:
            self._applied = max(self._applied, stored or 0)
            target = self._target
        if self._applied >= target:
            return
        try:
            self._log.segment_for(self._applied)  # OffsetOutOfRange when retention deleted it
            with self._log.lock:
                segments = list(self._log.segments)
            index_flushed(source=OpenSegmentSource(segments), start=self._applied,
                          target=target, max_record_size=self._max_record_size,
                          batch=self._batch,
                          segment_end=lambda offset: self._log.segment_for(offset).end,
                          apply=self._apply_here)
        except BaseException as exc:
            if not is_transient(exc):
                self._give_up(exc)
                return
            log.warning("index writes fail while the broker closes (%s); the next open "
                        "indexes the rest from the log", exc)

    def _apply_here(self, entries: list[QueueEntry], applied: int, ends: list[Mark],
                    timers: list[TimerChange]) -> None:
        self._index.apply(entries, applied, ends, timers)
        with self._cond:
            self._applied = applied
            self._cond.notify_all()
