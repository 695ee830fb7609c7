"""The indexer process: the broker's index writer in a process of its own
(``index_writer = "process"``), so that no thread of the broker trades the interpreter lock
with its event loop item by item while LMDB writes.

Run by :class:`~fmq.index.process_dispatcher.ProcessDispatcher` as
``python -m fmq.index.indexer_process ...`` (never forked: the broker has threads and an
open LMDB environment). It reads the flushed end of the log from its standard input
(:mod:`fmq.index.writer_wire`), reads the flushed records from the segment files itself
(:func:`~fmq.index.flushed_scan.index_flushed`: the scanner and the one ``index_items``
classification), writes them with the applied offset into the same LMDB environment in
large transactions (LMDB's lock file serialises it with the broker's own index writes), and
reports each transaction on its standard output.

It never indexes past the flushed end it was told, so the index still holds only flushed
records. It exits at once when its standard input ends (the broker died: no orphan
indexer); a closing broker kills it and indexes the rest itself. A transient write error
(a full disk, :func:`~fmq.index.lmdb_env.is_transient`) is reported and retried with
exponential back-off; a failed write of LMDB's meta page (EIO), after which LMDB refuses
every transaction of this process's environment (``MDB_PANIC``), is reported as failing and
ends the process with status 3: the broker starts a new one, which opens the environment
afresh; anything else is reported and ends the process with status 1.

It writes the broker's index or none: it never creates one, and it refuses an index
directory whose data file is not the one the broker opened (deleted or replaced while the
broker ran): indexing into a new one would leave the broker reading an index nobody
writes and, after a restart, an index missing everything before the point it started at.

Its first report names the queues (and whether timers were added) of what an earlier
indexer wrote without reporting (killed between its LMDB commit and its report), so the
broker wakes those queues' pulls and the timer service as if that report had come.
"""

from __future__ import annotations

import argparse
import bisect
import ctypes
import logging
import os
import select
import signal
import sys
import time

import lmdb

from fmq.datadir import INDEX_DATA_FILE
from fmq.errors import FMQError, IndexCorrupt
from fmq.index import writer_wire as wire
from fmq.index.entries import Mark, QueueEntry, TimerChange, TimerEntry
from fmq.index.flushed_scan import index_flushed
from fmq.index.lmdb_env import is_transient
from fmq.index.store import IndexStore
from fmq.log.reader import DirectorySource
from fmq.threadname import name_os_process

log = logging.getLogger("fmq.indexer")
#: The exit status after LMDB gave up on this process's environment (MDB_PANIC).
EXIT_REOPEN = 3
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class SegmentFiles(DirectorySource):
    """The log's segment files, each mapped once (the scan runs once per flush batch) and
    unmapped once the applied offset has passed it (retention may delete it)."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self._maps: dict[int, object] = {}
        self._bases: list[int] = []

    def bases(self) -> list[int]:
        self._bases = super().bases()
        return self._bases

    def read(self, base: int):  # noqa: ANN201 - an mmap or b""
        buf = self._maps.get(base)
        if buf is None or not len(buf):  # an empty file may have grown since
            buf = self._maps[base] = super().read(base)
        return buf

    def segment_end(self, offset: int) -> int:
        base = self._bases[bisect.bisect_right(self._bases, offset) - 1]
        return base + len(self.read(base))

    def forget_below(self, offset: int) -> None:
        for base in [b for b in self._maps if b + len(self._maps[b]) <= offset]:
            del self._maps[base]


class Commands:
    """The broker's commands on standard input: the newest flushed end, whether someone
    is waiting for the index (skip the linger), and whether the pipe ended (``closed``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.flushed = 0
        self.hurry = False
        self.closed = False
        self._rest = b""

    def read(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` (None: no limit) for commands and take all that came."""
        if self.closed:
            if timeout:
                time.sleep(timeout)
            return
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return
        data = os.read(self.fd, 1 << 16)
        if not data:
            self.closed = True
            return
        data = self._rest + data
        for kind, offset in wire.parse_commands(data):
            if kind == wire.FLUSHED:
                self.flushed = max(self.flushed, offset)
            elif kind == wire.HURRY:
                self.hurry = True
        self._rest = data[len(data) - len(data) % wire.COMMAND_SIZE:]


class Indexer:
    def __init__(self, *, index: IndexStore, log_dir: str, batch: int, max_record_size: int,
                 start: int, linger: float, retry_initial: float, retry_max: float,
                 commands: Commands, out: int) -> None:
        self.index = index
        self.segments = SegmentFiles(log_dir)
        self.batch = batch
        self.max_record_size = max_record_size
        #: Where the broker's reports end: what lies between it and the stored applied
        #: offset an earlier indexer wrote without reporting.
        self.reported = start
        stored = index.applied_offset()
        self.applied = start if stored is None else max(stored, start)
        self.linger = linger
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.commands = commands
        self.out = out
        self.retries = 0
        self.failing = False

    def run(self) -> int:
        commands = self.commands
        commands.flushed = max(commands.flushed, self.applied)
        queues, timers_added = self._unreported()
        self._report(wire.applied_report(self.applied, queues, timers_added))
        delay = self.retry_initial
        while True:
            if commands.closed:
                # The broker died: stop writing at once, its next open recovers the index
                # (a new broker may be recovering already).
                return 0
            if commands.flushed <= self.applied:
                commands.read(None)
                continue
            if not self.failing and not commands.hurry and not commands.closed:
                # Gather a few flushes per LMDB transaction (as the dispatcher thread does).
                deadline = time.monotonic() + self.linger
                while not commands.hurry and not commands.closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    commands.read(left)
            commands.hurry = False
            try:
                self._index_to(commands.flushed)
            except BaseException as exc:
                if isinstance(exc, lmdb.PanicError):
                    # A failed write of LMDB's meta page (EIO) left this process's
                    # environment unusable, not the index (LMDB wrote the old meta back): a
                    # new indexer opens it afresh. The broker refuses sends meanwhile.
                    log.error("index write failed and LMDB gave up on this process's "
                              "environment: %s; exiting so that the broker starts a new "
                              "indexer", exc)
                    self._report(wire.failing_report(f"{type(exc).__name__}: {exc}",
                                                     self.retries + 1))
                    return EXIT_REOPEN
                if not is_transient(exc):
                    log.exception("indexer stopped: %s", exc)
                    self._report(wire.error_report(f"{type(exc).__name__}: {exc}"))
                    return 1
                if commands.closed:  # the broker is gone: its next open indexes the rest
                    return 0
                self._failed(exc, delay)
                commands.read(delay)
                delay = min(delay * 2, self.retry_max)
                continue
            delay = self.retry_initial
            if self.failing:
                self.failing = False
                log.warning("index writes work again; indexed up to %d", self.applied)
                self._report(wire.recovered_report())

    def _unreported(self) -> tuple[set[tuple[str, int]], bool]:
        """The queues and whether timers were added in the index transactions an earlier
        indexer committed but did not report (the log from the broker's last report to
        the stored applied offset), read again from the log, not applied."""
        queues: set[tuple[str, int]] = set()
        timers_added = False
        if self.applied <= self.reported:
            return queues, timers_added

        def collect(entries: list[QueueEntry], applied: int, ends: list[Mark],
                    timers: list[TimerChange]) -> None:
            nonlocal timers_added
            queues.update((e.topic, e.queue_id) for e in entries)
            timers_added = timers_added or any(type(t) is TimerEntry for t in timers)

        try:
            index_flushed(source=self.segments, start=self.reported, target=self.applied,
                          max_record_size=self.max_record_size, batch=self.batch,
                          segment_end=self.segments.segment_end, apply=collect)
        except (FMQError, OSError) as exc:  # damaged or deleted: those waiters wake late
            log.warning("cannot read the log the last indexer wrote unreported (%s); "
                        "pulls waiting for it wake at their deadline", exc)
        return queues, timers_added

    def _failed(self, exc: BaseException, delay: float) -> None:
        if not self.failing:
            log.error("index write failed: %s; retrying with back-off up to %.1f s (free "
                      "disk space or fix the disk)", exc, self.retry_max)
        self.failing = True
        self.retries += 1
        self._report(wire.failing_report(f"{type(exc).__name__}: {exc}", self.retries))

    def _index_to(self, target: int) -> None:
        index_flushed(source=self.segments, start=self.applied, target=target,
                      max_record_size=self.max_record_size, batch=self.batch,
                      segment_end=self.segments.segment_end, apply=self._apply)
        self.segments.forget_below(self.applied)

    def _apply(self, entries: list[QueueEntry], applied: int, ends: list[Mark],
               timers: list[TimerChange]) -> None:
        self.index.apply(entries, applied, ends, timers)
        self.applied = applied
        self._report(wire.applied_report(
            applied, {(e.topic, e.queue_id) for e in entries},
            any(type(t) is TimerEntry for t in timers)))

    def _report(self, line: bytes) -> None:
        os.write(self.out, line)  # a line is below PIPE_BUF or written whole, blocking


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when the broker's thread that started it ends
    (Linux; the broker starts it from a thread that lives as long as its index writer). A
    killed broker's indexer must not live on with the log and index open: a restarted
    broker would find it writing, a file system it uses could not be unmounted."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the broker was gone before that took effect
        sys.exit(0)


def file_id(path: str) -> str:
    """The identity of the index's data file (device and inode), as ``--index-file``."""
    st = os.stat(os.path.join(path, INDEX_DATA_FILE))
    return f"{st.st_dev}:{st.st_ino}"


def open_brokers_index(path: str, map_size: int, expected: str | None) -> IndexStore:
    """The index the broker opened (``expected``: its data file's :func:`file_id`), never
    a new one; IndexCorrupt when the directory is gone or holds another index."""
    advice = ("nothing more is indexed. Restart the broker: its open rebuilds the index "
              "from the log")
    try:
        # The broker opened and checked the index before starting this process.
        index = IndexStore(path, map_size, verify_length=False, create=False)
    except IndexCorrupt as exc:
        raise IndexCorrupt(f"the indexer process cannot open the broker's index ({exc}: "
                           f"deleted while the broker ran?); {advice}") from exc
    try:
        same = expected is None or file_id(path) == expected
    except FileNotFoundError:
        same = False
    if not same:
        index.close()
        raise IndexCorrupt(f"the index at {path} is not the one the broker opened (deleted "
                           f"or replaced while the broker ran); {advice}")
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fmq.index.indexer_process")
    parser.add_argument("--index", required=True, help="the LMDB index directory")
    parser.add_argument("--log", required=True, help="the log directory")
    parser.add_argument("--map-size", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--max-record-size", type=int, required=True)
    parser.add_argument("--start", type=int, required=True,
                        help="applied offset when the index has none")
    parser.add_argument("--linger", type=float, default=0.001)
    parser.add_argument("--retry-initial", type=float, required=True)
    parser.add_argument("--retry-max", type=float, required=True)
    parser.add_argument("--parent", type=int, help="the broker's process id: die with it")
    parser.add_argument("--index-file", help="the broker's index data file, as device:inode")
    args = parser.parse_args(argv)
    if args.parent is not None:
        die_with_parent(args.parent)
    name_os_process("fmq-indexer")  # per-thread figures tell it from other interpreters
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s fmq-indexer %(levelname)s %(message)s")
    # Reports go to the original standard output alone: anything printed goes to stderr.
    out = os.dup(1)
    os.dup2(2, 1)
    try:
        index = open_brokers_index(args.index, args.map_size, args.index_file)
    except IndexCorrupt as exc:
        log.error("%s", exc)
        os.write(out, wire.error_report(str(exc)))
        return 1
    try:
        return Indexer(index=index, log_dir=args.log, batch=args.batch,
                       max_record_size=args.max_record_size, start=args.start,
                       linger=args.linger, retry_initial=args.retry_initial,
                       retry_max=args.retry_max, commands=Commands(0), out=out).run()
    except BrokenPipeError:  # the broker is gone
        return 0
    finally:
        index.close()


if __name__ == "__main__":
    sys.exit(main())
