"""The cross-segment verdicts and the log end: the only place that decides what damage means.

The scanner detects; the caller decides. It classifies every problem as

* **torn**: a record that fails its checks (or a segment that stops without its filler)
  with *nothing valid after it* anywhere in the log: a write that never completed. Recovery
  cuts it.
* **corrupt**: a record that fails its checks with valid records after it, a segment that
  stops without its filler with valid records in a later segment, or a missing segment:
  damage to data that was once complete. With :attr:`OnCorruption.RAISE` the scanner
  raises :class:`~fmq.errors.CorruptLog` naming segment and offset; with
  :attr:`OnCorruption.SKIP` it records a :class:`Damage`, jumps to the next valid record
  and goes on (``log verify``, the Spark source's permissive mode).

:class:`SegmentScan` judges one segment in the context of the whole log, so a reader that
sees one segment at a time (a Spark task) gives the same answers as :class:`LogScanner`,
which walks them all. Recovery, ``fmq log verify`` and ``dump``, the dispatcher's catch-up
and the Spark source all read the log through this module and :mod:`fmq.log.reader`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from fmq.datadir import format_segment_name
from fmq.errors import CorruptLog
from fmq.log.reader import (
    Damage,
    DamageKind,
    DirectorySource,
    OnCorruption,
    SegmentEnd,
    SegmentReader,
    SegmentSource,
    find_valid_record,
)
from fmq.log.record import FORMAT_MAX_RECORD, Record


def log_end(bases: Sequence[int], sizes: Mapping[int, int], last_base: int | None,
            last_end: int, last_is_filler: bool) -> int:
    """Where the valid log ends (where the next append goes), from the last valid record:
    its end; after a filler, the end of its segment when that is the last one, else the
    base of the next segment. ``last_base`` is the base of the segment holding the last
    valid record, None when the log holds none (then: the first base, or 0)."""
    if last_base is None:
        return bases[0] if bases else 0
    if not last_is_filler:
        return last_end
    i = bases.index(last_base)
    return last_base + sizes[last_base] if i == len(bases) - 1 else bases[i + 1]


class LogSegments:
    """The segment list of one log over a byte source, and the questions asked across
    segments: does a valid record follow? would a scan from the start get here?"""

    def __init__(self, source: SegmentSource, max_record_size: int = FORMAT_MAX_RECORD,
                 bases: list[int] | None = None) -> None:
        self.source = source
        self.bases = source.bases() if bases is None else bases
        self.max_record_size = max_record_size

    def read(self, index: int):
        return self.source.read(self.bases[index])

    def later_valid(self, index: int) -> tuple[int, int] | None:
        """(base, position) of the first valid record in a segment after ``index``."""
        for base in self.bases[index + 1 :]:
            hit = find_valid_record(self.source.read(base), 0, base, self.max_record_size)
            if hit is not None:
                return base, hit
        return None

    def reached(self, index: int, buf) -> bool:
        """Would a scan from the first segment get to segment ``index`` (whose bytes are
        ``buf``)? It stops at the first segment that ends without its filler with nothing
        valid after it; a segment holding a valid record is therefore always reached."""
        base = self.bases[index]
        if index == 0 or find_valid_record(buf, 0, base, self.max_record_size) is not None:
            return True
        if self.later_valid(index) is not None:
            return True
        # Nothing valid here or later: reached only when the segment before is sealed
        # (a segment without valid records cannot be, so the scan stopped there).
        prev_base = self.bases[index - 1]
        prev = self.source.read(prev_base)
        if find_valid_record(prev, 0, prev_base, self.max_record_size) is None:
            return False
        reader = SegmentReader(prev, prev_base, format_segment_name(prev_base),
                               self.max_record_size)
        for _item in reader.records(0, OnCorruption.SKIP, copy_body=False):
            pass
        return reader.end is SegmentEnd.SEALED


class SegmentScan:
    """One segment read as part of the log: its records, its corruption (yielded as
    :class:`Damage` with ``OnCorruption.SKIP``) and, after iteration, its verdict.

    ``previous_end`` is where the segment before it ended (None: do not check for a missing
    segment). With ``standalone`` the scan first asks whether a scan from the start would
    get here, and reports a missing segment or a torn tail only then (a Spark task). With
    ``positions`` it yields each valid record's position in :attr:`buf` instead of the
    decoded record (:meth:`SegmentReader.positions`: a column-wise reader's input); with
    ``stop`` as well it reads one range of a split segment
    (:meth:`SegmentReader.split_points`): records starting in ``[start, stop)``, and the
    segment's end verdicts only in the range that reaches the end. With ``batched`` it
    yields lists: runs of items as the reader decoded them, and each damage alone as
    ``[damage]``."""

    def __init__(self, log: LogSegments, index: int, *, start: int = 0,
                 previous_end: int | None = None, on_corruption: OnCorruption,
                 copy_body: bool = True, standalone: bool = False,
                 positions: bool = False, stop: int | None = None,
                 queue_entries: bool = False, batched: bool = False) -> None:
        self.log = log
        self.index = index
        self.base = log.bases[index]
        self.name = format_segment_name(self.base)
        self.start = start
        self.previous_end = previous_end
        self.on_corruption = on_corruption
        self.copy_body = copy_body
        self.standalone = standalone
        self.positions = positions
        self.stop = stop
        self.queue_entries = queue_entries
        self.batched = batched
        self.buf = log.read(index)
        self.size = len(self.buf)
        #: After iteration: whether the segment ended with its filler, where its valid
        #: records stop, the torn tail found here (None if none), and whether the log
        #: ends in this segment (nothing valid follows).
        self.sealed = False
        self.end_offset = self.base + start
        self.torn: Damage | None = None
        self.log_ends_here = False
        self._reached: bool | None = None

    def _is_reached(self) -> bool:
        if not self.standalone:
            return True
        if self._reached is None:
            self._reached = self.log.reached(self.index, self.buf)
        return self._reached

    def _corrupt(self, offset: int, reason: str) -> Damage:
        if self.on_corruption is OnCorruption.RAISE:
            raise CorruptLog(self.name, offset, reason)
        return Damage(DamageKind.CORRUPT, self.name, offset, reason)

    def __iter__(self) -> Iterator[Record | int | Damage]:
        base, previous_end = self.base, self.previous_end
        if previous_end is not None and base != previous_end and self._is_reached():
            missing = self._corrupt(previous_end,
                                    f"the segment starting at {previous_end} is missing")
            yield [missing] if self.batched else missing
        if self.start > self.size:
            raise CorruptLog(self.name, base + self.start,
                             "start offset lies past the end of the segment")
        reader = SegmentReader(self.buf, base, self.name, self.log.max_record_size)
        if self.positions:
            yield from reader.positions(self.start, self.on_corruption, self.stop, self.batched)
        else:
            yield from reader.records(self.start, self.on_corruption, self.copy_body, self.stop,
                                      self.queue_entries, self.batched)
        self.end_offset = base + reader.end_position
        if reader.end is SegmentEnd.STOP:
            return  # the range after this one holds the segment's end
        if reader.end is SegmentEnd.SEALED:
            self.sealed = True
            return
        # The segment stops without its filler: fine only if nothing valid follows.
        is_last = self.index == len(self.log.bases) - 1
        later = None if is_last else self.log.later_valid(self.index)
        if later is not None:
            lbase, lpos = later
            cut = self._corrupt(
                self.end_offset,
                f"segment ends without its filler ({reader.torn_reason or 'no more records'}) "
                f"but segment {format_segment_name(lbase)} holds a valid record at {lbase + lpos}")
            yield [cut] if self.batched else cut
            return
        self.log_ends_here = True
        if reader.end is SegmentEnd.BAD_RECORD and self._is_reached():
            self.torn = Damage(DamageKind.TORN_TAIL, self.name, self.end_offset, reader.torn_reason)


class LogScanner:
    """Iterate the records of a log directory (or any byte source) from ``start_offset``.

    After iteration: ``end_offset`` is where the valid log ends (where the next append goes;
    the end of the last segment when it is sealed), ``torn`` is the torn-tail
    :class:`Damage` or None, ``damages`` the corruption skipped with ``OnCorruption.SKIP``,
    ``empty_tail_segments`` the bases of segments after the end that hold nothing valid.
    """

    def __init__(
        self,
        directory: str | None = None,
        *,
        source: SegmentSource | None = None,
        start_offset: int | None = None,
        max_record_size: int = FORMAT_MAX_RECORD,
        on_corruption: OnCorruption | str = OnCorruption.RAISE,
        copy_body: bool = True,
        segment_bases: list[int] | None = None,
        queue_entries: bool = False,
        batched: bool = False,
    ) -> None:
        try:
            self.on_corruption = OnCorruption(on_corruption)
        except ValueError:
            raise ValueError("on_corruption must be 'raise' or 'skip'") from None
        if source is None:
            if directory is None:
                raise ValueError("give a log directory or a segment source")
            source = DirectorySource(directory)
        self.directory = directory
        self.segments = LogSegments(source, max_record_size, segment_bases)
        self.bases = self.segments.bases
        self.start_offset = start_offset
        self.max_record_size = max_record_size
        self.copy_body = copy_body
        #: Recovery's redo: a plain MESSAGE may come as its queue entry, a
        #: :class:`~fmq.log.record.QueueEntry` (:meth:`fmq.log.reader.SegmentReader.records`).
        self.queue_entries = queue_entries
        #: Recovery's redo: lists of items in log order (a run at once), not items; only
        #: with ``OnCorruption.RAISE``, where damage raises instead of coming out.
        self.batched = batched
        if batched and self.on_corruption is not OnCorruption.RAISE:
            raise ValueError("a batched scan raises on damage: on_corruption='raise'")
        self.end_offset = self.bases[0] if self.bases else 0
        self.torn: Damage | None = None
        self.damages: list[Damage] = []
        self.empty_tail_segments: list[int] = []
        self.last_sealed = False

    def __iter__(self) -> Iterator[Record]:
        bases = self.bases
        if not bases:
            return
        start = bases[0] if self.start_offset is None else self.start_offset
        first = 0
        while first + 1 < len(bases) and bases[first + 1] <= start:
            first += 1
        if start < bases[0]:
            start = bases[0]
        previous_end = None
        for i in range(first, len(bases)):
            scan = SegmentScan(self.segments, i, start=start - bases[i] if i == first else 0,
                               previous_end=previous_end, on_corruption=self.on_corruption,
                               copy_body=self.copy_body, queue_entries=self.queue_entries,
                               batched=self.batched)
            previous_end = scan.base + scan.size
            if self.on_corruption is OnCorruption.RAISE:
                yield from scan  # damage raises: only records come out (recovery's redo)
            else:
                for item in scan:
                    if isinstance(item, Damage):
                        self.damages.append(item)
                    else:
                        yield item
            self.end_offset = scan.end_offset
            self.last_sealed = scan.sealed
            if scan.sealed:
                if i == len(bases) - 1:
                    self.end_offset = scan.base + scan.size
                continue
            if scan.log_ends_here:
                self.torn = scan.torn
                self.empty_tail_segments = bases[i + 1 :]
                return
