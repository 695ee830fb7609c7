"""The one segment reader: the records of one segment's bytes, and the damage inside it.

A segment's bytes come from a *byte source*, so the same reader serves every caller: a
log directory on local disk (:class:`DirectorySource`, read with mmap), the open segments
of a running log (:class:`OpenSegmentSource`, mmaps of their descriptors), or the Spark
file source (local paths or filesystem URIs). A source lists segment bases in log order
and hands out the bytes of one segment as anything that supports ``len``, ``find`` and
the buffer protocol (an mmap or bytes).

The reader only judges what one segment shows; what a problem means for the whole log
(is anything valid after it?) is decided by :mod:`fmq.log.scanner`.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Protocol

from fmq.datadir import format_segment_name, parse_segment_name
from fmq.errors import BadRecord, CorruptLog, IncompleteRecord
from fmq.log.record import (
    HEADER_SIZE,
    MAGIC_BYTES,
    MAGIC_POSITION,
    Record,
    RecordType,
    check,
    decode,
    decode_at,
    decode_entry_run,
    decode_run,
    position_run,
    record_length,
)
from fmq.log.segment import Segment

_MAGIC_FIRST = MAGIC_BYTES[:1]


class OnCorruption(StrEnum):
    """What a reader does with corruption (a bad record with valid records after it)."""

    RAISE = "raise"  # raise CorruptLog naming segment and offset
    SKIP = "skip"  # report a Damage, jump to the next valid record and go on


class DamageKind(StrEnum):
    TORN_TAIL = "torn"  # nothing valid after it: a write that never completed
    CORRUPT = "corrupt"  # valid records after it: damage to data once complete


class SegmentEnd(Enum):
    """How the records of one segment stop."""

    SEALED = "sealed"  # with the end filler
    END = "end"  # zeros (or the end of the file) after the last record
    BAD_RECORD = "torn"  # a bad record with nothing valid after it in this segment
    # (the scanner decides across segments whether it is a torn tail or corruption)
    STOP = "stop"  # reached the caller's stop position (a range of a split segment)


@dataclass(frozen=True)
class Damage:
    kind: DamageKind
    segment: str
    offset: int
    reason: str

    def to_dict(self) -> dict:
        return {"kind": self.kind.value, "segment": self.segment, "offset": self.offset,
                "reason": self.reason}


class SegmentSource(Protocol):
    """Where segment bytes come from."""

    def bases(self) -> list[int]:
        """Base offsets of the segments, in log order."""

    def read(self, base: int) -> bytes | mmap.mmap:
        """The whole bytes of the segment at ``base`` (``b""`` when the file is empty)."""


def list_segments(directory: str) -> list[int]:
    """Base offsets of the segment files in ``directory``, in log order."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    bases = [b for b in (parse_segment_name(n) for n in names) if b is not None]
    return sorted(bases)


def map_file(path: str) -> bytes | mmap.mmap:
    """A read-only mmap of the file at ``path`` (``b""`` when it is empty)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)


class DirectorySource:
    """The segment files of a log directory on a local filesystem."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def bases(self) -> list[int]:
        return list_segments(self.directory)

    def read(self, base: int) -> bytes | mmap.mmap:
        return map_file(os.path.join(self.directory, format_segment_name(base)))


class OpenSegmentSource:
    """The segments a running log holds open (a snapshot of its list), read through their
    own descriptors, so a file retention unlinks meanwhile stays readable."""

    def __init__(self, segments: Sequence[Segment]) -> None:
        self._by_base = {seg.base: seg for seg in segments}

    def bases(self) -> list[int]:
        return list(self._by_base)

    def read(self, base: int) -> bytes | mmap.mmap:
        return self._by_base[base].map()


def find_valid_record(buf, start: int, base_offset: int, max_record_size: int) -> int | None:
    """Position of the first fully valid record at or after ``start`` in ``buf``, or None.

    Only a candidate that passes every check *and* whose header names its own position
    counts, so stale or shifted bytes never pass for a record."""
    search_from = start + MAGIC_POSITION
    while True:
        # The unwritten tail of a preallocated segment is zeros: a search for the magic's
        # first byte alone runs at memchr speed (about 10x the three-byte search here) and
        # finds nothing there; only where that byte occurs is the magic itself looked for.
        near = buf.find(_MAGIC_FIRST, search_from)
        if near < 0:
            return None
        hit = buf.find(MAGIC_BYTES, near)
        if hit < 0:
            return None
        candidate = hit - MAGIC_POSITION
        try:
            decode(buf, candidate, base_offset=base_offset, max_record_size=max_record_size,
                   copy_body=False)
            return candidate
        except (BadRecord, IncompleteRecord):
            search_from = hit + 1


#: Records decoded by one call of ``decode_run`` (bounds what a scan holds at once).
_RUN = 256
#: Positions per run: a column-wise reader takes a chunk of 4,096 records at once.
_POSITION_RUN = 4096
#: Where a record's type byte lies in its header (fmq.log.record: the header's layout).
_TYPE_POSITION = 11


class SegmentReader:
    """The records of one segment buffer (an mmap or bytes), from a start position."""

    def __init__(self, buf, base_offset: int, name: str, max_record_size: int) -> None:
        self.buf = buf
        self.base = base_offset
        self.name = name
        self.max_record_size = max_record_size
        #: After iteration: how the records stopped, where, and why when torn.
        self.end: SegmentEnd | None = None
        self.end_position = 0
        self.torn_reason = ""

    def records(self, start: int, on_corruption: OnCorruption, copy_body: bool = True,
                stop: int | None = None, queue_entries: bool = False,
                batched: bool = False) -> Iterator:
        """Yield every valid record from ``start``; with ``OnCorruption.SKIP`` also a
        :class:`Damage` for each corrupt stretch skipped, just before the record after it.
        With ``queue_entries`` (recovery's redo), a plain MESSAGE may come as its
        :class:`~fmq.log.record.QueueEntry` instead of a Record (``decode_entry_run``:
        a run holds entries only or records only; on the pure path every record is a
        Record). With ``batched``, yield lists of those items in log order instead (a run
        as it was decoded, anything else alone), for a reader that takes a run at once."""
        base, limit = self.base, self.max_record_size

        buf = self.buf

        def parse(pos: int) -> tuple[Record, int, int]:
            rec = decode_at(buf, pos, base + pos, limit, copy_body)
            return rec, rec.size, rec.type

        if decode_run is None:
            return self._walk(start, on_corruption, parse, stop, None, batched)

        if queue_entries and decode_entry_run is not None:
            def parse_run(pos: int, end: int, out: list) -> int:
                return decode_entry_run(buf, pos, base, limit, copy_body, end, _RUN, out)
        else:
            def parse_run(pos: int, end: int, out: list) -> int:
                return decode_run(buf, pos, base, limit, copy_body, end, _RUN, out)

        return self._walk(start, on_corruption, parse, stop, parse_run, batched)

    def positions(self, start: int, on_corruption: OnCorruption,
                  stop: int | None = None, batched: bool = False) -> Iterator:
        """As :meth:`records`, but yield each valid record's position in the buffer instead
        of decoding it: every check of :func:`~fmq.log.record.check` (length, CRC, header)
        runs, the text fields are left to the caller (a column-wise reader validates them
        in bulk and falls back to :meth:`records` when that fails). With ``stop``, end
        (``SegmentEnd.STOP``) at the first record that starts at or after it. With
        ``batched``, yield lists of positions (a run of up to 4,096 records checked in one
        call, ``fmq.log.record.position_run``, where compiled) and ``[damage]``."""
        base, limit, buf = self.base, self.max_record_size, self.buf

        def parse(pos: int) -> tuple[int, int, int]:
            header = check(buf, pos, base_offset=base, max_record_size=limit)
            return pos, header[0], header[4]

        if position_run is None:
            return self._walk(start, on_corruption, parse, stop, None, batched)

        def parse_run(pos: int, end: int, out: list) -> int:
            return position_run(buf, pos, base, limit, end, _POSITION_RUN, out)

        return self._walk(start, on_corruption, parse, stop, parse_run, batched)

    def _walk(self, start: int, on_corruption: OnCorruption, parse,
              stop: int | None = None, parse_run=None, batched: bool = False) -> Iterator:
        """``parse(pos)`` reads one item (or raises); ``parse_run(pos, end, out)``, when
        given, reads a run of valid records at once (``decode_run``), and the walk goes on
        where it stopped, with ``parse`` if it stopped early. ``batched``: yield lists."""
        buf = self.buf
        pos = start
        size = len(buf)
        filler = RecordType.FILLER
        stop = size + 1 if stop is None else stop
        run: list = []
        while True:
            if pos >= stop:
                self.end, self.end_position = SegmentEnd.STOP, pos
                return
            if parse_run is not None:
                pos = parse_run(pos, min(stop, size), run)
                if run:
                    last = run[-1]
                    if batched:
                        yield run
                        run = []
                    else:
                        yield from run
                        run.clear()
                    if self._is_filler(last):
                        self.end, self.end_position = SegmentEnd.SEALED, pos
                        return
                    if pos >= size:
                        self.end, self.end_position = SegmentEnd.END, pos
                        return
                    continue
            try:
                item, length, rtype = parse(pos)
            except (BadRecord, IncompleteRecord) as exc:
                # A zero length (checked only here: a valid record never has one) is where
                # the writes stopped, unless a valid record follows.
                if record_length(buf, pos) == 0:
                    later = find_valid_record(buf, pos, self.base, self.max_record_size)
                    if later is None:
                        self.end, self.end_position = SegmentEnd.END, pos
                        return
                    reason = (f"zeroed bytes where a record should be; valid record at "
                              f"{self.base + later}")
                    damage = self._corrupt(pos, reason, on_corruption)
                    yield [damage] if batched else damage
                    pos = later
                    continue
                later = find_valid_record(buf, pos + 1, self.base, self.max_record_size)
                if later is None:
                    self.end, self.end_position, self.torn_reason = SegmentEnd.BAD_RECORD, pos, exc.reason
                    return
                damage = self._corrupt(pos, exc.reason, on_corruption)
                yield [damage] if batched else damage
                pos = later
                continue
            yield [item] if batched else item
            pos += length
            if rtype == filler:
                self.end, self.end_position = SegmentEnd.SEALED, pos
                return
            if pos >= size:
                self.end, self.end_position = SegmentEnd.END, pos
                return

    def _is_filler(self, item) -> bool:
        """Whether the last item of a run (a Record, a queue entry or a position) is the
        segment's FILLER."""
        if type(item) is int:
            return self.buf[item + _TYPE_POSITION] == RecordType.FILLER
        return type(item) is Record and item.type == RecordType.FILLER

    def split_points(self, every: int) -> list[int]:
        """Positions, about ``every`` bytes apart, at which the segment can be read in
        independent ranges (``positions(start=p_i, stop=p_i+1)``), the first being 0.

        The walk follows the length fields only; each point it keeps passes every check of
        :func:`~fmq.log.record.check` (its header names its own position), so it is a
        record a whole-segment walk reaches too: that walk only ever resynchronises to the
        *first* valid record after damage, and valid records tile the segment. The walk
        stops at the first length that leads nowhere or at a candidate that fails."""
        buf, size = self.buf, len(self.buf)
        points = [0]
        pos, next_cut = 0, every
        while True:
            length = record_length(buf, pos)
            if length < HEADER_SIZE or pos + length > size:
                return points
            pos += length
            if pos >= next_cut:
                try:
                    check(buf, pos, base_offset=self.base, max_record_size=self.max_record_size)
                except (BadRecord, IncompleteRecord):
                    return points
                points.append(pos)
                next_cut = pos + every

    def _corrupt(self, pos: int, reason: str, on_corruption: OnCorruption) -> Damage:
        if on_corruption is OnCorruption.RAISE:
            raise CorruptLog(self.name, self.base + pos, reason)
        return Damage(DamageKind.CORRUPT, self.name, self.base + pos, reason)
