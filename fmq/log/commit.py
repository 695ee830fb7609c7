"""Group commit: the append buffer, the leader/follower flush and the sticky failure.

Appends queue their bytes here in memory, per segment, under the log's lock. A thread
that needs its record on disk calls :meth:`GroupCommit.wait_durable`: the first waiter
that finds no flush under way becomes the *leader*: it takes everything queued, writes it
with one ``pwrite`` per segment and one ``fdatasync`` per segment, and wakes the others.
Waiters that arrive meanwhile are covered by the next flush: one fsync serves every thread
that queued before it. Each waiter sleeps on a lock of its own, and a flush wakes only
the waiters it covered, plus one other to lead the next flush: with 64 threads waiting,
waking all of them on every flush (a condition's ``notify_all``) cost more in thread
switches than the flush itself.

A flush can also be led from outside any waiting thread: the server's event loop (unless
``SendBatcher.LOOP_FLUSH`` is off) takes the queued bytes with
:meth:`GroupCommit.start_flush` (marking the flush under way, so
threads calling ``wait_durable`` meanwhile become its followers), has its flusher thread
write and fdatasync them without the interpreter lock (:mod:`fmq.log.flusher`), and ends it
with :meth:`GroupCommit.end_flush`: the same bookkeeping as a leader's (offsets, statistics,
the covered waiters and one new leader woken, ``on_flushed``). Only the usual flush goes
that way: one segment's bytes, no other segment left unsynced, the operating system's own
I/O (:attr:`~fmq.log.fileio.FileIO.plain`); a segment roll, or a test's I/O that counts or
crashes each step, goes through a leader.

A failed write or fsync is fatal: the failure is kept, every waiter is woken with
:class:`~fmq.errors.LogFailed` and every later append is refused. An fsync is never
retried (PostgreSQL's "fsyncgate": a retried fsync can succeed after the kernel dropped
the data).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from fmq.errors import LogFailed
from fmq.log.flush_stats import FlushStats
from fmq.log.segment import Segment


class _Chunk:
    """Bytes queued for one segment, starting at ``position`` inside it."""

    __slots__ = ("segment", "position", "data")

    def __init__(self, segment: Segment, position: int) -> None:
        self.segment = segment
        self.position = position
        self.data = bytearray()


class PendingFlush:
    """A flush :meth:`GroupCommit.start_flush` took: ``data`` to write at ``position`` of
    ``fd`` and fdatasync, then :meth:`GroupCommit.end_flush`."""

    __slots__ = ("fd", "data", "position", "target", "started")

    def __init__(self, chunk: _Chunk, target: int) -> None:
        self.fd = chunk.segment.fd
        self.data = chunk.data
        self.position = chunk.position
        #: The log offset the flush makes durable.
        self.target = target
        self.started = time.monotonic()


class GroupCommit:
    """The bytes queued for the disk and how far they are written and fdatasync'd.

    ``cond`` wraps the log's lock: queueing happens with it held, flushing without."""

    def __init__(self, cond: threading.Condition, offset: int) -> None:
        self._cond = cond
        self._chunks: list[_Chunk] = []
        #: Log offset just past the last byte queued (where the next flush ends).
        self.queued_end = offset
        self._written = offset  # bytes handed to the OS up to here
        self._flushed = offset  # bytes fdatasync'd up to here
        self._leading = False
        #: Threads waiting for a flush: (end offset, sync, their lock, released to wake).
        self._waiters: list[tuple[int, bool, threading.Lock]] = []
        self._woken = 0  # waiters the last flush woke: they may be about to append again
        self.coalesce = True
        self._unsynced: list[Segment] = []  # written (async mode) but not yet fdatasync'd
        self._failed: BaseException | None = None
        self._closed = False
        #: Called (outside the lock) with the new durable offset after every flush.
        self.on_flushed: Callable[[int], None] | None = None
        self.flush_count = 0
        self.flush_stats = FlushStats()

    def restart_at(self, offset: int) -> None:
        """Everything below ``offset`` is on disk (recovery places the log end; lock held)."""
        self.queued_end = self._written = self._flushed = offset

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def failed(self) -> BaseException | None:
        return self._failed

    def check_writable(self) -> None:
        if self._failed is not None:
            raise LogFailed(self._failed)
        if self._closed:
            raise LogFailed("the log is closed")

    def fail(self, exc: BaseException) -> None:
        """Keep the first failure: from now on the log refuses appends (lock held)."""
        if self._failed is None:
            self._failed = exc

    # ------------------------------------------------------------------ queueing (lock held)

    def buffer_for(self, segment: Segment, position: int) -> bytearray:
        """The queue buffer that bytes for ``segment`` at ``position`` are appended to."""
        chunks = self._chunks
        if not chunks or chunks[-1].segment is not segment:
            chunks.append(_Chunk(segment, position))
        return chunks[-1].data

    def drop_empty_buffer(self) -> None:
        """Forget the last buffer if nothing is left in it (an append was undone)."""
        if self._chunks and not self._chunks[-1].data:
            self._chunks.pop()

    # ------------------------------------------------------------------ flushing

    def wait_durable(self, end_offset: int, sync: bool = True) -> None:
        """Return once every byte below ``end_offset`` is written (and fdatasync'd when
        ``sync``). Raises :class:`LogFailed` if a write or fsync failed first."""
        while True:
            with self._cond:
                if self._failed is not None:
                    raise LogFailed(self._failed)
                if (self._flushed if sync else self._written) >= end_offset:
                    return
                wake = None
                if self._leading:
                    wake = threading.Lock()
                    wake.acquire()
                    self._waiters.append((end_offset, sync, wake))
                else:
                    # This thread leads the next flush: everything queued so far goes in it.
                    self._leading = True
                    if self._woken and self.coalesce:
                        self._woken = 0
                        # Threads woken by the last flush are about to append: let them, so
                        # this flush carries their records too (bigger batches, fewer
                        # fsyncs).
                        self._cond.release()
                        time.sleep(0)
                        self._cond.acquire()
                    chunks, self._chunks = self._chunks, []
                    target = self.queued_end
                    unsynced = self._unsynced
            if wake is not None:
                wake.acquire()  # released by a flush that covers us, or to lead the next
                continue
            self._flush_batch(chunks, target, sync, unsynced)

    def start_flush(self) -> PendingFlush | None:
        """Take everything queued for a flush the caller has written elsewhere (its
        flusher thread), marking a flush under way; end it with :meth:`end_flush`.
        None when a flush is under way, nothing is queued, the log failed or closed, or the
        flush is not the usual one (a segment roll, an unsynced segment, an I/O that is not
        :attr:`~fmq.log.fileio.FileIO.plain`): ``wait_durable`` then leads it."""
        with self._cond:
            chunks = self._chunks
            if (self._leading or len(chunks) != 1 or self._failed is not None
                    or self._closed):
                return None
            segment = chunks[0].segment
            if self._unsynced not in ([], [segment]) or not segment.io.plain:
                return None
            self._chunks = []
            self._leading = True
            return PendingFlush(chunks[0], self.queued_end)

    def end_flush(self, flush: PendingFlush, error: BaseException | None) -> None:
        """The flush :meth:`start_flush` took was written and synced (``error`` None), or
        failed: the failure is kept (fatal, never retried) and every waiter woken with it."""
        if error is not None:
            self._flush_failed(error)
        else:
            self._flush_ended(flush.target, True, flush.started, [])

    def _wake_covered(self) -> None:
        """After a flush (lock held): wake the waiters it covered, and one more to lead the
        next flush if any are left."""
        if not self._waiters:
            return
        left = []
        for waiter in self._waiters:
            end, sync, wake = waiter
            if self._failed is not None or (self._flushed if sync else self._written) >= end:
                wake.release()
                self._woken += 1
            else:
                left.append(waiter)
        if left and not self._leading:
            left.pop(0)[2].release()
        self._waiters = left

    def _flush_batch(self, chunks: list[_Chunk], target: int, sync: bool,
                     unsynced: list[Segment]) -> None:
        started = time.monotonic()
        touched: list[Segment] = []  # the segments written, when not ``sync``
        try:
            if sync and len(chunks) == 1 and unsynced in ([], [chunks[0].segment]):
                # The usual flush: one segment's bytes, written and synced in one call.
                chunks[0].segment.write_then_sync(chunks[0].position, chunks[0].data)
            else:
                touched = self._write_chunks(chunks, sync, unsynced)
        except BaseException as exc:  # OSError, or a test's injected failure
            self._flush_failed(exc)
            raise LogFailed(exc) from exc
        self._flush_ended(target, sync, started, touched)

    def _flush_failed(self, exc: BaseException) -> None:
        with self._cond:
            self.fail(exc)
            self._leading = False
            self._wake_covered()
            self._cond.notify_all()

    def _flush_ended(self, target: int, sync: bool, started: float,
                     touched: list[Segment]) -> None:
        with self._cond:
            self._leading = False
            self._written = max(self._written, target)
            if sync:
                self.flush_stats.observe(time.monotonic() - started,
                                         max(0, target - self._flushed))
                self._flushed = max(self._flushed, target)
                self._unsynced = []
                self.flush_count += 1
            else:
                for seg in touched:
                    if seg not in self._unsynced:
                        self._unsynced.append(seg)
            self._wake_covered()
            self._cond.notify_all()  # close() waits for the flush under way
        if sync and self.on_flushed is not None:
            self.on_flushed(target)

    @staticmethod
    def _write_chunks(chunks: list[_Chunk], sync: bool, unsynced: list[Segment]
                      ) -> list[Segment]:
        """Write ``chunks`` in order and, when ``sync``, fdatasync every segment written or
        left unsynced, each segment's earlier ones first. Returns the segments written."""
        touched: list[Segment] = []
        synced: list[Segment] = []
        for chunk in chunks:
            if touched and chunk.segment is not touched[-1]:
                # Crossing into a later segment: what precedes it (the filler too) is
                # made durable first. Otherwise a power cut or a failed fsync could keep
                # records of the new segment but lose the old one's tail, which recovery
                # must call corruption (valid records after a gap), not a torn tail.
                for seg in unsynced + touched:
                    if seg not in synced:
                        seg.sync()
                        synced.append(seg)
            chunk.segment.write(chunk.position, chunk.data)
            if chunk.segment not in touched:
                touched.append(chunk.segment)
        if sync:
            for seg in unsynced:
                if seg not in touched and seg not in synced:
                    seg.sync()
            for seg in touched:
                if seg not in synced:
                    seg.sync()
        return touched

    def close(self) -> None:
        """Wait for a flush under way, then refuse every later append."""
        with self._cond:
            while self._leading:
                self._cond.wait()
            self._closed = True
