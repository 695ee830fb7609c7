"""The segmented log: the facade that places records and hands them to group commit.

Appending is split in two so that the broker can assign queue offsets in log order:

1. Under :attr:`Log.lock`, :meth:`Log.append_locked` places an encoded record at the end
   of the log (rolling to a new segment when it does not fit) and queues its bytes in
   memory. Nothing touches the disk yet.
2. Without the lock, :meth:`Log.wait_durable` returns once the record is on disk, through
   :mod:`fmq.log.commit` (group commit: one fsync serves every thread that queued before
   it; a failed write or fsync fails the log for good).

The segment files themselves are :mod:`fmq.log.segments`' job. The roll creates the new
segment before it seals the old one, and :meth:`Log.reserve_locked` creates every segment
a batch of records will need before the first of them is placed, so a batch is stored whole
or not at all; a segment that cannot be created for want of a descriptor or disk space
refuses the append with :class:`~fmq.errors.SegmentUnavailable` and changes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from fmq.errors import OffsetOutOfRange
from fmq.log.commit import GroupCommit, PendingFlush
from fmq.log.fileio import OS_IO, FileIO
from fmq.log.flush_stats import FlushStats
from fmq.log.record import (
    HEADER_SIZE,
    QueueEntry,
    Record,
    RecordType,
    encode_into,
    encode_message_run,
    encode_tx_run,
    filler,
)
from fmq.log.segment import Segment
from fmq.log.segments import SegmentSet

#: Room that takes any record: after a roll a record is written whatever its size.
_WHOLE = 1 << 61


class Log:
    def __init__(self, directory: str, segment_size: int, io: FileIO = OS_IO) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.io = io
        self.lock = threading.Lock()
        self._cond = threading.Condition(self.lock)
        self._files = SegmentSet(directory, segment_size, io, self._fail)
        self._active: Segment | None = None
        self._position = 0  # next write position inside the active segment
        first = self._files.first_base
        self._next_offset = first if first is not None else 0
        self._commit = GroupCommit(self._cond, self._next_offset)
        #: Called (inside the lock) with every record appended, in log order.
        self.on_append: Callable[[Record], None] | None = None
        #: Called (inside the lock) instead of ``on_append`` with the records of
        #: :meth:`append_messages_locked`, as ``(end offset, queue entry)`` pairs in log
        #: order, and with the index items of :meth:`append_tx_records_locked`'s records
        #: (queue entries and transaction ends, :meth:`hand_over_locked`). Whoever sets
        #: ``on_append`` sets this too, or those methods are not used.
        self.on_append_entries: Callable[[list[tuple[int, QueueEntry]]], None] | None = None

    # ------------------------------------------------------------------ positioning

    def start_at(self, end_offset: int) -> None:
        """Place the write position at ``end_offset`` (recovery calls this once)."""
        with self.lock:
            self._next_offset = end_offset
            self._commit.restart_at(end_offset)
            self._active = None
            for seg in self.segments:
                if seg.base <= end_offset < seg.end:
                    self._active = seg
                    self._position = end_offset - seg.base
            # end_offset == a sealed segment's end, or an empty log: the next append
            # creates a new segment at end_offset.
            self._files.prepare_spare(self._next_base())

    @property
    def segments(self) -> list[Segment]:
        """The segments in log order (the live list: copy it to keep it)."""
        return self._files.segments

    @property
    def first_offset(self) -> int:
        first = self._files.first_base
        return first if first is not None else self._next_offset

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def flushed_offset(self) -> int:
        return self._commit.flushed_offset

    @property
    def failed(self) -> BaseException | None:
        return self._commit.failed

    @property
    def flush_count(self) -> int:
        return self._commit.flush_count

    @property
    def flush_stats(self) -> FlushStats:
        """Latency and size histograms of the synchronous flushes (the metrics)."""
        return self._commit.flush_stats

    @property
    def coalesce(self) -> bool:
        """Whether a flush leader yields once to let woken writers join its flush."""
        return self._commit.coalesce

    @coalesce.setter
    def coalesce(self, value: bool) -> None:
        self._commit.coalesce = value

    @property
    def on_flushed(self) -> Callable[[int], None] | None:
        """Called (outside the lock) with the new durable offset after every flush."""
        return self._commit.on_flushed

    @on_flushed.setter
    def on_flushed(self, callback: Callable[[int], None] | None) -> None:
        self._commit.on_flushed = callback

    # ------------------------------------------------------------------ append

    def append_locked(self, record: Record,
                      encode: Callable[[bytearray, int, Record], int] = encode_into) -> int:
        """Place ``record`` at the end of the log; the caller holds :attr:`lock`.

        Sets ``record.log_offset`` and ``record.size`` and returns the size. The record is
        durable only after :meth:`wait_durable` for its end offset returns. ``encode``
        writes the same bytes as ``encode_into`` (a narrower, faster one for some types:
        :mod:`fmq.log.record.marks`).
        """
        self._commit.check_writable()
        if self._active is None:
            self._roll()
        buf = self._commit.buffer_for(self._active, self._position)
        start = len(buf)
        record.log_offset = self._next_offset
        size = encode(buf, start, record)
        if self._position + size + HEADER_SIZE > self._active.size:
            del buf[start:]  # does not fit: the record goes to the next segment
            self._commit.drop_empty_buffer()
            self._roll()
            buf = self._commit.buffer_for(self._active, self._position)
            start = len(buf)
            record.log_offset = self._next_offset
            size = encode(buf, start, record)
        self._advance(size)
        if self.on_append is not None:
            self.on_append(record)
        return size

    def takes_message_runs(self) -> bool:
        """Whether :meth:`append_messages_locked` may place plain sends, and
        :meth:`append_tx_records_locked` a transaction's records: nobody needs them as
        :class:`Record` objects (``on_append`` unset, or ``on_append_entries`` set)."""
        return self.on_append is None or self.on_append_entries is not None

    def append_messages_locked(self, messages: list, queue_ids: list[int],
                               queue_offsets: list[int], store_time: int,
                               placed: list[tuple[int, QueueEntry]]) -> None:
        """Place the MESSAGE records of a batch of sends, message ``i`` in queue
        ``queue_ids[i]`` at ``queue_offsets[i]`` (the caller holds :attr:`lock` and reserved
        the segments): the bytes :meth:`append_locked` writes for each record, rolling
        where it does, without a :class:`Record` per message. Appends ``(end offset,
        entry)`` per record to ``placed``, ``entry`` its :class:`QueueEntry`
        (as ``fmq.index.derive.queue_entry`` makes it), which
        ``on_append_entries`` gets too. On an exception the records placed before it stay
        placed, in ``placed`` and handed over."""
        self._commit.check_writable()
        first = len(placed)
        i, n = 0, len(messages)
        try:
            while i < n:
                if self._active is None:
                    self._roll()
                buf = self._commit.buffer_for(self._active, self._position)
                start = len(buf)
                # A record fits while a FILLER's header still fits after it (append_locked).
                room = self._active.size - self._position - HEADER_SIZE
                done = encode_message_run(buf, room, self._next_offset, store_time, messages,
                                          queue_ids, queue_offsets, i, n, placed)
                if done == i:  # as append_locked: roll, and the record goes in whole
                    self._commit.drop_empty_buffer()
                    self._roll()
                    buf = self._commit.buffer_for(self._active, self._position)
                    start = len(buf)
                    done = encode_message_run(buf, _WHOLE, self._next_offset, store_time,
                                              messages, queue_ids, queue_offsets, i, i + 1,
                                              placed)
                self._advance(len(buf) - start)
                i = done
        finally:
            if len(placed) > first and self.on_append_entries is not None:
                self.on_append_entries(placed[first:] if first else placed)

    def append_tx_records_locked(self, tx_id: str, producer_group: str, store_time: int,
                                 records: list[tuple], placed: list[tuple[int, int]]) -> None:
        """Place the records of one transaction request, ``records`` as
        :func:`fmq.log.record.runs.encode_tx_run` takes them (a PREPARE and its
        PRE_MESSAGEs, or the REF/TX records and the COMMIT; the caller holds :attr:`lock`
        and reserved the segments): the bytes :meth:`append_locked` writes for each record,
        rolling where it does, without a :class:`Record` per record. Appends ``(log
        offset, size)`` per record to ``placed``. Nothing is handed to ``on_append``: the
        caller hands the records' index items over (:meth:`hand_over_locked`), so this is
        for a log that :meth:`takes_message_runs`. On an exception the records placed
        before it stay placed, and in ``placed``."""
        self._commit.check_writable()
        i, n = 0, len(records)
        while i < n:
            if self._active is None:
                self._roll()
            buf = self._commit.buffer_for(self._active, self._position)
            start = len(buf)
            room = self._active.size - self._position - HEADER_SIZE
            try:
                done = encode_tx_run(buf, room, self._next_offset, store_time, tx_id,
                                     producer_group, records, i, n, placed)
                if done == i:  # as append_locked: roll, and the record goes in whole
                    self._commit.drop_empty_buffer()
                    self._roll()
                    buf = self._commit.buffer_for(self._active, self._position)
                    start = len(buf)
                    done = encode_tx_run(buf, _WHOLE, self._next_offset, store_time, tx_id,
                                         producer_group, records, i, i + 1, placed)
            finally:  # what was encoded is placed, even when a later record failed
                self._advance(len(buf) - start)
            i = done

    def append_tx_runs_locked(self, store_time: int,
                              runs: list[tuple[str, str, list[tuple]]],
                              placed: list[tuple[int, int]]) -> None:
        """:meth:`append_tx_records_locked` of several transactions' records, ``runs`` of
        ``(tx_id, producer_group, records)`` in this order (a turn's PREPAREs, or its
        commits): the same bytes and ``placed`` items as one call per run, the buffer, its
        room and the write position taken once while the records fit in the active
        segment; a run that does not fit (and every later one) goes to
        :meth:`append_tx_records_locked`, which rolls. The caller holds :attr:`lock` and
        reserved the segments. On an exception the records placed before it stay placed,
        and in ``placed``."""
        self._commit.check_writable()
        at, count = 0, len(runs)
        if self._active is not None:
            buf = self._commit.buffer_for(self._active, self._position)
            start = len(buf)
            # A record fits while a FILLER's header still fits after it (append_locked).
            room = self._active.size - self._position - HEADER_SIZE
            offset = self._next_offset
            try:
                while at < count:
                    tx_id, group, records = runs[at]
                    n = len(records)
                    done = encode_tx_run(buf, room - (len(buf) - start), offset, store_time,
                                         tx_id, group, records, 0, n, placed)
                    if done:
                        last = placed[-1]
                        offset = last[0] + last[1]
                    if done != n:  # the rest of this run, and the later ones, roll
                        runs = [(tx_id, group, records[done:]), *runs[at + 1:]]
                        at, count = 0, len(runs)
                        break
                    at += 1
            finally:  # what was encoded is placed, even when a later record failed
                self._advance(len(buf) - start)
        while at < count:
            tx_id, group, records = runs[at]
            self.append_tx_records_locked(tx_id, group, store_time, records, placed)
            at += 1

    def hand_over_locked(self, items: list[tuple[int, object]]) -> None:
        """Hand ``(end offset, index item)`` pairs of records placed without ``on_append``
        (:meth:`append_tx_records_locked`) to ``on_append_entries``, in log order; the
        items are those ``fmq.index.derive.index_items`` derives from the records (queue
        entries and transaction ends). The caller holds :attr:`lock`."""
        if items and self.on_append_entries is not None:
            self.on_append_entries(items)

    def _advance(self, size: int) -> None:
        self._position += size
        self._next_offset += size
        self._commit.queued_end = self._next_offset

    def reserve_locked(self, sizes: Iterable[int]) -> None:
        """Create now every segment that appending records of ``sizes`` (in this order)
        will roll into; the caller holds :attr:`lock` and appends them in the same hold.

        Raises SegmentUnavailable before any of the records is placed, so a batch is never
        stored in part. Sizes may be upper bounds: the roll is next-fit packing, and larger
        records never need fewer segments (at worst a segment is created a little early).
        """
        self._commit.check_writable()
        capacity = self._active.size if self._active is not None else 0
        position = self._position if self._active is not None else capacity
        rolls = 0
        for size in sizes:
            if position + size + HEADER_SIZE > capacity:
                rolls += 1
                capacity, position = self.segment_size, 0
            position += size
        ahead = self._files.ahead
        while len(ahead) < rolls:
            ahead.append(self._files.create(self._next_base()))

    def append_copy_locked(self, segment_base: int, segment_size: int, data: bytes,
                           records: list[Record]) -> None:
        """Place bytes a primary shipped: ``records`` (already checked, decoded from
        ``data``) lie at this log's end, in the primary's segment ``[segment_base,
        segment_base + segment_size)``. The caller holds :attr:`lock`; the bytes are
        durable after :meth:`wait_durable`, as for :meth:`append_locked`. A FILLER ends
        the segment: the next copy starts a new one, as the primary did."""
        self._commit.check_writable()
        seg = self._active
        if seg is None or self._next_offset == seg.end:
            if segment_base != self._next_offset:
                raise ValueError(f"a copied segment starts at {segment_base}, not at the "
                                 f"log end {self._next_offset}")
            seg = self._files.create(segment_base, segment_size)
            self._files.add(seg)
            self._active, self._position = seg, 0
            if segment_size == self.segment_size:
                self._files.prepare_spare(seg.end)
        elif seg.base != segment_base or seg.size != segment_size:
            raise ValueError(f"copied bytes for segment {segment_base}+{segment_size} but "
                             f"the active segment is {seg.base}+{seg.size}")
        self._commit.buffer_for(seg, self._position).extend(data)
        self._advance(len(data))
        if self.on_append is not None:
            for record in records:
                self.on_append(record)
        if records and records[-1].type == RecordType.FILLER:
            self._next_offset = seg.end
            self._commit.queued_end = self._next_offset

    def _next_base(self) -> int:
        """Where the next segment to create starts (lock held)."""
        if self._files.ahead:
            return self._files.ahead[-1].end
        return self._active.end if self._active is not None else self._next_offset

    def _roll(self) -> None:
        """Seal the active segment with a filler and start the next one (lock held).

        The next segment is created first: when that fails nothing has changed."""
        ahead = self._files.ahead
        new = ahead.pop(0) if ahead else self._files.create(self._next_base())
        seg = self._active
        if seg is not None:
            self._commit.buffer_for(seg, self._position).extend(filler(self._next_offset))
            self._next_offset = seg.end
            self._commit.queued_end = self._next_offset
        self._files.add(new)
        self._active = new
        self._position = 0
        self._files.prepare_spare(self._next_base())

    def _fail(self, exc: BaseException) -> None:
        self._commit.fail(exc)

    def wait_durable(self, end_offset: int, sync: bool = True) -> None:
        """Return once every byte below ``end_offset`` is written (and fdatasync'd when
        ``sync``). Raises :class:`LogFailed` if a write or fsync failed first."""
        self._commit.wait_durable(end_offset, sync)

    def start_flush(self) -> PendingFlush | None:
        """Take the queued bytes for a flush the caller writes itself (None: leave it to
        :meth:`wait_durable`): :meth:`GroupCommit.start_flush`."""
        return self._commit.start_flush()

    def end_flush(self, flush: PendingFlush, error: BaseException | None) -> None:
        """End a flush :meth:`start_flush` took: :meth:`GroupCommit.end_flush`."""
        self._commit.end_flush(flush, error)

    def flush(self) -> None:
        """Write and fdatasync everything appended so far."""
        self.wait_durable(self._next_offset, sync=True)

    # ------------------------------------------------------------------ read

    def segment_for(self, offset: int) -> Segment:
        return self._files.segment_for(offset, self.first_offset)

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
        with self.lock:
            deleted = self._files.truncate(offset)
            if self._active is not None and self._active not in self.segments:
                self._active = None
        return deleted

    def delete_segment(self, seg: Segment) -> None:
        """Delete a whole sealed segment (retention); its file descriptor stays open until
        the next deletion or close, so a concurrent reader never hits a reused descriptor."""
        with self.lock:
            if seg is self._active:
                raise ValueError("the active segment is never deleted")
            self._files.delete(seg)

    @property
    def active_segment(self) -> Segment | None:
        return self._active

    def fits_in_active(self, nbytes: int) -> bool:
        """Whether a record of ``nbytes`` fits in the active segment (lock held)."""
        seg = self._active
        return seg is not None and self._position + nbytes + HEADER_SIZE <= seg.size

    def close(self) -> None:
        self._commit.close()
        self._files.close()
