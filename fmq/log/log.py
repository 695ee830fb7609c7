"""The segmented log: append with group commit, roll, read, truncate, delete.

Appending is split in two so that the broker can assign queue offsets in log order:

1. Under :attr:`Log.lock`, :meth:`Log.append_locked` places an encoded record at the end
   of the log (rolling to a new segment when it does not fit) and queues its bytes in
   memory. Nothing touches the disk yet.
2. Without the lock, :meth:`Log.wait_durable` returns once the record is on disk. The first
   waiter that finds no flush under way becomes the *leader*: it takes everything queued,
   writes it with one ``pwrite`` per segment and one ``fdatasync`` per segment, and wakes the
   others. Waiters that arrive meanwhile are covered by the next flush: one fsync serves
   every thread that queued before it (group commit).

A failed write or fsync is fatal: the log keeps the exception, wakes every waiter with
:class:`~fmq.errors.LogFailed` and refuses all later appends. It never retries an fsync
(PostgreSQL's "fsyncgate": a retried fsync can succeed after the kernel dropped the data).

A next segment that cannot be *created* for want of a descriptor or disk space is not a
lost write: the append that needs it raises :class:`~fmq.errors.SegmentUnavailable` with
the log exactly as before, and the next append tries again. The roll creates the new
segment before it seals the old one, and :meth:`Log.reserve_locked` creates every segment
a batch of records will need before the first of them is placed, so a batch is stored whole
or not at all.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable

from fmq.datadir import TEMP_SUFFIX, format_segment_name
from fmq.errors import LogFailed, OffsetOutOfRange, SegmentUnavailable
from fmq.log.fileio import OS_IO, FileIO
from fmq.log.reader import list_segments
from fmq.log.record import HEADER_SIZE, Record, encode_into, filler
from fmq.log.segment import Segment

logger = logging.getLogger(__name__)

_ZEROS = bytes(1 << 20)
#: Segments at least this large are prepared (zero-filled) in the background ahead of the
#: roll; smaller ones cost less to create than a thread hand-off.
PREALLOCATE_AHEAD_MIN = 1 << 20


class _Chunk:
    """Bytes queued for one segment, starting at ``position`` inside it."""

    __slots__ = ("segment", "position", "data")

    def __init__(self, segment: Segment, position: int) -> None:
        self.segment = segment
        self.position = position
        self.data = bytearray()


class Log:
    def __init__(self, directory: str, segment_size: int, io: FileIO = OS_IO) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.io = io
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(TEMP_SUFFIX):  # a segment whose creation never completed
                io.unlink(os.path.join(directory, name))
        self.segments: list[Segment] = [Segment.open(directory, b, io) for b in list_segments(directory)]
        self._bases = [s.base for s in self.segments]
        self._retired: list[Segment] = []
        self.lock = threading.Lock()
        self._cond = threading.Condition(self.lock)
        self._chunks: list[_Chunk] = []
        self._active: Segment | None = None
        self._position = 0  # next write position inside the active segment
        self._next_offset = self._bases[0] if self._bases else 0
        self._written = self._next_offset  # bytes handed to the OS up to here
        self._flushed = self._next_offset  # bytes fdatasync'd up to here
        self._leading = False
        self._waiting = 0  # threads waiting for a flush
        self.coalesce = True
        self._unsynced: list[Segment] = []  # written (async mode) but not yet fdatasync'd
        self._failed: BaseException | None = None
        self._closed = False
        self._spare: tuple[int, int] | None = None  # (base, fd) of a prepared next segment
        #: Segments created ahead for the records being placed (reserve_locked), in order.
        self._ready: list[Segment] = []
        self._refused = 0  # appends refused since a segment last could be created
        self._spare_thread: threading.Thread | None = None
        #: Called (outside the lock) with the new durable offset after every flush.
        self.on_flushed: Callable[[int], None] | None = None
        #: Called (inside the lock) with every record appended, in log order.
        self.on_append: Callable[[Record], None] | None = None
        self.flush_count = 0

    # ------------------------------------------------------------------ positioning

    def start_at(self, end_offset: int) -> None:
        """Place the write position at ``end_offset`` (recovery calls this once)."""
        with self.lock:
            self._next_offset = self._written = self._flushed = end_offset
            self._active = None
            for seg in self.segments:
                if seg.base <= end_offset < seg.end:
                    self._active = seg
                    self._position = end_offset - seg.base
            # end_offset == a sealed segment's end, or an empty log: the next append
            # creates a new segment at end_offset.
            self._prepare_spare(self._next_base())

    @property
    def first_offset(self) -> int:
        return self._bases[0] if self._bases else self._next_offset

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def failed(self) -> BaseException | None:
        return self._failed

    # ------------------------------------------------------------------ append

    def append_locked(self, record: Record) -> bytes:
        """Place ``record`` at the end of the log; the caller holds :attr:`lock`.

        Sets ``record.log_offset`` and ``record.size`` and returns the encoded bytes. The
        record is durable only after :meth:`wait_durable` for its end offset returns.
        """
        self._check_writable()
        if self._active is None:
            self._roll()
        chunk = self._chunk_for_active()
        start = len(chunk.data)
        record.log_offset = self._next_offset
        size = encode_into(chunk.data, start, record)
        if self._position + size + HEADER_SIZE > self._active.size:
            del chunk.data[start:]  # does not fit: the record goes to the next segment
            if not chunk.data:
                self._chunks.pop()
            self._roll()
            chunk = self._chunk_for_active()
            start = len(chunk.data)
            record.log_offset = self._next_offset
            size = encode_into(chunk.data, start, record)
        data = bytes(memoryview(chunk.data)[start : start + size])
        self._position += size
        self._next_offset += size
        if self.on_append is not None:
            self.on_append(record)
        return data

    def _chunk_for_active(self) -> _Chunk:
        chunks = self._chunks
        if not chunks or chunks[-1].segment is not self._active:
            chunks.append(_Chunk(self._active, self._position))
        return chunks[-1]

    def reserve_locked(self, sizes: Iterable[int]) -> None:
        """Create now every segment that appending records of ``sizes`` (in this order)
        will roll into; the caller holds :attr:`lock` and appends them in the same hold.

        Raises SegmentUnavailable before any of the records is placed, so a batch is never
        stored in part. Sizes may be upper bounds: the roll is next-fit packing, and larger
        records never need fewer segments (at worst a segment is created a little early).
        """
        self._check_writable()
        capacity = self._active.size if self._active is not None else 0
        position = self._position if self._active is not None else capacity
        rolls = 0
        for size in sizes:
            if position + size + HEADER_SIZE > capacity:
                rolls += 1
                capacity, position = self.segment_size, 0
            position += size
        while len(self._ready) < rolls:
            self._ready.append(self._create_segment(self._next_base()))

    def _check_writable(self) -> None:
        if self._failed is not None:
            raise LogFailed(self._failed)
        if self._closed:
            raise LogFailed("the log is closed")

    def _next_base(self) -> int:
        """Where the next segment to create starts (lock held)."""
        if self._ready:
            return self._ready[-1].end
        return self._active.end if self._active is not None else self._next_offset

    def _roll(self) -> None:
        """Seal the active segment with a filler and start the next one (lock held).

        The next segment is created first: when that fails nothing has changed."""
        new = self._ready.pop(0) if self._ready else self._create_segment(self._next_base())
        seg = self._active
        if seg is not None:
            pad = filler(self._next_offset)
            chunks = self._chunks
            if not chunks or chunks[-1].segment is not seg:
                chunks.append(_Chunk(seg, self._position))
            chunks[-1].data += pad
            self._next_offset = seg.end
        self.segments.append(new)
        self._bases.append(new.base)
        self._active = new
        self._position = 0
        self._prepare_spare(self._next_base())

    def _create_segment(self, base: int) -> Segment:
        """The installed segment at ``base``: the spare prepared in the background, or one
        created here (lock held). A missing descriptor or disk space raises
        SegmentUnavailable and leaves the log as it was; any other error fails the log."""
        try:
            new = self._take_spare(base)
            if new is None:
                new = Segment.create(self.directory, base, self.segment_size, self.io)
        except SegmentUnavailable as exc:
            if not self._refused:  # once per outage: clients retry, each would log it
                logger.warning("%s", exc)
            self._refused += 1
            raise
        except OSError as exc:
            self._fail(exc)
            raise LogFailed(exc) from exc
        if self._refused:
            logger.warning("created segment %s after refusing %d appends without it",
                           new.name, self._refused)
            self._refused = 0
        return new

    def _prepare_spare(self, base: int) -> None:
        """Zero-fill the segment after the active one in the background (lock held)."""
        if self.segment_size < PREALLOCATE_AHEAD_MIN or self._closed:
            return
        if self._spare_thread is not None and self._spare_thread.is_alive():
            return

        def work() -> None:
            try:
                fd = Segment.prepare(self.directory, base, self.segment_size, self.io)
            except (OSError, SegmentUnavailable) as exc:  # the roll then creates it itself
                logger.warning("could not prepare the next segment: %s", exc)
                return
            self._spare = (base, fd)

        self._spare_thread = threading.Thread(target=work, name="fmq-segment-prep", daemon=True)
        self._spare_thread.start()

    def _take_spare(self, base: int) -> Segment | None:
        if self._spare_thread is not None:
            self._spare_thread.join()  # at worst as slow as creating it here
            self._spare_thread = None
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        spare_base, fd = spare
        if spare_base != base:  # the layout changed (truncation): throw it away
            self._discard(spare_base, fd)
            return None
        return Segment.install(self.directory, base, self.segment_size, fd, self.io)

    def _discard(self, base: int, fd: int) -> None:
        self.io.close(fd)
        try:
            self.io.unlink(os.path.join(self.directory, format_segment_name(base)) + TEMP_SUFFIX)
        except FileNotFoundError:
            pass

    def wait_durable(self, end_offset: int, sync: bool = True) -> None:
        """Return once every byte below ``end_offset`` is written (and fdatasync'd when
        ``sync``). Raises :class:`LogFailed` if a write or fsync failed first."""
        while True:
            with self._cond:
                while True:
                    if self._failed is not None:
                        raise LogFailed(self._failed)
                    if (self._flushed if sync else self._written) >= end_offset:
                        return
                    if not self._leading:
                        break
                    self._waiting += 1
                    try:
                        self._cond.wait()
                    finally:
                        self._waiting -= 1
                # This thread leads the next flush: everything queued so far goes in it.
                self._leading = True
                if self._waiting and self.coalesce:
                    # Threads woken by the last flush are about to append: let them, so
                    # this flush carries their records too (bigger batches, fewer fsyncs).
                    self._cond.release()
                    time.sleep(0)
                    self._cond.acquire()
                chunks, self._chunks = self._chunks, []
                target = self._next_offset
                unsynced = self._unsynced
            self._flush_batch(chunks, target, sync, unsynced)

    def flush(self) -> None:
        """Write and fdatasync everything appended so far."""
        self.wait_durable(self._next_offset, sync=True)

    def _flush_batch(self, chunks: list[_Chunk], target: int, sync: bool,
                     unsynced: list[Segment]) -> None:
        touched: list[Segment] = []
        synced: list[Segment] = []
        try:
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
        except BaseException as exc:  # OSError, or a test's injected failure
            with self._cond:
                self._fail(exc)
                self._leading = False
                self._cond.notify_all()
            raise LogFailed(exc) from exc
        with self._cond:
            self._leading = False
            self._written = max(self._written, target)
            if sync:
                self._flushed = max(self._flushed, target)
                self._unsynced = []
                self.flush_count += 1
            else:
                for seg in touched:
                    if seg not in self._unsynced:
                        self._unsynced.append(seg)
            self._cond.notify_all()
        if sync and self.on_flushed is not None:
            self.on_flushed(target)

    def _fail(self, exc: BaseException) -> None:
        if self._failed is None:
            self._failed = exc

    # ------------------------------------------------------------------ read

    def segment_for(self, offset: int) -> Segment:
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            raise OffsetOutOfRange(
                f"log offset {offset} is before the first segment ({self.first_offset}); "
                f"it was deleted by retention"
            )
        seg = self.segments[i]
        if offset >= seg.end:
            raise OffsetOutOfRange(f"log offset {offset} lies past the end of the log")
        return seg

    def read(self, offset: int, size: int) -> bytes:
        """Bytes ``[offset, offset + size)``; they must lie in one segment."""
        seg = self.segment_for(offset)
        if offset + size > seg.end:
            raise OffsetOutOfRange(f"range {offset}+{size} crosses the end of segment {seg.name}")
        return seg.read(offset - seg.base, size)

    # ------------------------------------------------------------------ repair & retention

    def truncate(self, offset: int) -> list[str]:
        """Cut the log at ``offset``: zero the rest of its segment, delete later segments.

        Only recovery (torn tail) and the explicit repair command call this. A segment that
        would be left empty (``offset`` is its base) is deleted too, unless it is the first.
        Returns the names of the deleted segment files.
        """
        deleted: list[str] = []
        with self.lock:
            for seg in list(self.segments):
                if seg.base > offset or (seg.base == offset and seg is not self.segments[0]):
                    self._remove(seg)
                    deleted.append(seg.name)
                elif offset < seg.end:
                    pos = offset - seg.base
                    while pos < seg.size:
                        n = min(len(_ZEROS), seg.size - pos)
                        seg.write(pos, memoryview(_ZEROS)[:n])
                        pos += n
                    seg.sync()
            if deleted:
                self.io.fsync_dir(self.directory)
        return deleted

    def delete_segment(self, seg: Segment) -> None:
        """Delete a whole sealed segment (retention); its file descriptor stays open until
        the next deletion or close, so a concurrent reader never hits a reused descriptor."""
        with self.lock:
            if seg is self._active:
                raise ValueError("the active segment is never deleted")
            for old in self._retired:
                old.close()
            self._retired = []
            self._remove(seg)
            self.io.fsync_dir(self.directory)

    def _remove(self, seg: Segment) -> None:
        i = self.segments.index(seg)
        del self.segments[i]
        del self._bases[i]
        self.io.unlink(seg.path)
        if seg is self._active:
            self._active = None
        self._retired.append(seg)

    @property
    def active_segment(self) -> Segment | None:
        return self._active

    def fits_in_active(self, nbytes: int) -> bool:
        """Whether a record of ``nbytes`` fits in the active segment (lock held)."""
        seg = self._active
        return seg is not None and self._position + nbytes + HEADER_SIZE <= seg.size

    def close(self) -> None:
        with self._cond:
            while self._leading:
                self._cond.wait()
            self._closed = True
        if self._spare_thread is not None:
            self._spare_thread.join()
        if self._spare is not None:
            self._discard(*self._spare)
            self._spare = None
        if self._ready:  # created for records never placed: empty, no longer needed
            try:
                for seg in self._ready:
                    seg.close()
                    self.io.unlink(seg.path)
                self.io.fsync_dir(self.directory)
            except OSError as exc:  # recovery deletes empty segments after the end anyway
                logger.warning("could not remove unused segments: %s", exc)
            self._ready = []
        for seg in self.segments + self._retired:
            seg.close()
