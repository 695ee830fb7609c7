"""The one record iterator: walks segments, checks every record, reports damage.

The scanner detects; the caller decides. It classifies every problem as

* **torn**: a record that fails its checks (or a segment that stops without its filler)
  with *nothing valid after it* anywhere in the log: a write that never completed. Recovery
  cuts it.
* **corrupt**: a record that fails its checks with valid records after it: damage to data
  that was once complete. With ``on_corruption="raise"`` the scanner raises
  :class:`~fmq.errors.CorruptLog` naming segment and offset; with ``"skip"`` it records a
  :class:`Damage`, jumps to the next valid record and goes on (``log verify``, the Spark
  source's permissive mode).

"Valid record after it" is found by searching for the record magic and accepting only a
candidate that passes every check *and* whose header names its own position as log offset,
so stale or shifted bytes never count.

Recovery, ``fmq log verify``, ``fmq log dump``, the dispatcher's catch-up and the Spark job
all read the log through this module.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass

from fmq.datadir import format_segment_name, parse_segment_name
from fmq.errors import BadRecord, CorruptLog, TornRecord
from fmq.log.record import (
    FORMAT_MAX_RECORD,
    MAGIC_BYTES,
    MAGIC_POSITION,
    Record,
    RecordType,
    decode,
    record_length,
)


@dataclass(frozen=True)
class Damage:
    kind: str  # "torn" or "corrupt"
    segment: str
    offset: int
    reason: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "segment": self.segment, "offset": self.offset,
                "reason": self.reason}


def list_segments(directory: str) -> list[int]:
    """Base offsets of the segment files in ``directory``, in log order."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    bases = [b for b in (parse_segment_name(n) for n in names) if b is not None]
    return sorted(bases)


def find_valid_record(buf, start: int, base_offset: int, max_record_size: int) -> int | None:
    """Position of the first fully valid record at or after ``start`` in ``buf``, or None."""
    search_from = start + MAGIC_POSITION
    while True:
        hit = buf.find(MAGIC_BYTES, search_from)
        if hit < 0:
            return None
        candidate = hit - MAGIC_POSITION
        try:
            decode(buf, candidate, base_offset=base_offset, max_record_size=max_record_size,
                   copy_body=False)
            return candidate
        except (BadRecord, TornRecord):
            search_from = hit + 1


class SegmentReader:
    """The records of one segment buffer (an mmap or bytes), from ``start``."""

    def __init__(self, buf, base_offset: int, name: str, max_record_size: int) -> None:
        self.buf = buf
        self.base = base_offset
        self.name = name
        self.max_record_size = max_record_size
        #: After iteration: "sealed" (ended with its filler), "end" (zeros after the last
        #: record) or "torn" (a bad record with nothing valid after it in this segment).
        self.state = ""
        self.end_position = 0
        self.torn_reason = ""

    def records(self, start: int, damages: list[Damage], on_corruption: str,
                copy_body: bool = True) -> Iterator[Record]:
        buf = self.buf
        pos = start
        size = len(buf)
        while True:
            if record_length(buf, pos) == 0:
                later = find_valid_record(buf, pos, self.base, self.max_record_size)
                if later is None:
                    self.state, self.end_position = "end", pos
                    return
                reason = f"zeroed bytes where a record should be; valid record at {self.base + later}"
                pos = self._corrupt(pos, reason, later, damages, on_corruption)
                continue
            try:
                rec = decode(buf, pos, base_offset=self.base,
                             max_record_size=self.max_record_size, copy_body=copy_body)
            except (BadRecord, TornRecord) as exc:
                later = find_valid_record(buf, pos + 1, self.base, self.max_record_size)
                if later is None:
                    self.state, self.end_position, self.torn_reason = "torn", pos, exc.reason
                    return
                pos = self._corrupt(pos, exc.reason, later, damages, on_corruption)
                continue
            yield rec
            pos += rec.size
            if rec.type == RecordType.FILLER:
                self.state, self.end_position = "sealed", pos
                return
            if pos >= size:
                self.state, self.end_position = "end", pos
                return

    def _corrupt(self, pos: int, reason: str, later: int, damages: list[Damage],
                 on_corruption: str) -> int:
        if on_corruption == "raise":
            raise CorruptLog(self.name, self.base + pos, reason)
        damages.append(Damage("corrupt", self.name, self.base + pos, reason))
        return later


class LogScanner:
    """Iterate the records of a log directory from ``start_offset``.

    After iteration: ``end_offset`` is where the valid log ends (where the next append goes;
    the end of the last segment when it is sealed), ``torn`` is the torn-tail
    :class:`Damage` or None, ``damages`` the corruption skipped with ``on_corruption="skip"``,
    ``empty_tail_segments`` the bases of segments after the end that hold nothing valid.
    """

    def __init__(
        self,
        directory: str,
        *,
        start_offset: int | None = None,
        max_record_size: int = FORMAT_MAX_RECORD,
        on_corruption: str = "raise",
        copy_body: bool = True,
        segment_bases: list[int] | None = None,
    ) -> None:
        if on_corruption not in ("raise", "skip"):
            raise ValueError("on_corruption must be 'raise' or 'skip'")
        self.directory = directory
        self.bases = list_segments(directory) if segment_bases is None else segment_bases
        self.start_offset = start_offset
        self.max_record_size = max_record_size
        self.on_corruption = on_corruption
        self.copy_body = copy_body
        self.end_offset = self.bases[0] if self.bases else 0
        self.torn: Damage | None = None
        self.damages: list[Damage] = []
        self.empty_tail_segments: list[int] = []
        self.last_sealed = False

    def _map(self, base: int):
        path = os.path.join(self.directory, format_segment_name(base))
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return b""
            return mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)

    def _later_has_valid(self, index: int) -> tuple[int, int] | None:
        for base in self.bases[index + 1 :]:
            buf = self._map(base)
            hit = find_valid_record(buf, 0, base, self.max_record_size)
            if hit is not None:
                return base, hit
        return None

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
            base = bases[i]
            buf = self._map(base)
            name = format_segment_name(base)
            if previous_end is not None and base != previous_end:
                reason = f"the segment starting at {previous_end} is missing"
                if self.on_corruption == "raise":
                    raise CorruptLog(name, previous_end, reason)
                self.damages.append(Damage("corrupt", name, previous_end, reason))
            previous_end = base + len(buf)
            reader = SegmentReader(buf, base, name, self.max_record_size)
            position = start - base if i == first else 0
            if position > len(buf):
                raise CorruptLog(name, start, "start offset lies past the end of the segment")
            yield from reader.records(position, self.damages, self.on_corruption, self.copy_body)
            self.end_offset = base + reader.end_position
            is_last = i == len(bases) - 1
            if reader.state == "sealed":
                self.last_sealed = True
                if is_last:
                    self.end_offset = base + len(buf)
                continue
            self.last_sealed = False
            # The segment stops without its filler: fine only if nothing valid follows.
            later = None if is_last else self._later_has_valid(i)
            if later is not None:
                lbase, lpos = later
                reason = (f"segment ends without its filler ({reader.torn_reason or 'no more records'}) "
                          f"but segment {format_segment_name(lbase)} holds a valid record at "
                          f"{lbase + lpos}")
                if self.on_corruption == "raise":
                    raise CorruptLog(name, self.end_offset, reason)
                self.damages.append(Damage("corrupt", name, self.end_offset, reason))
                continue
            if reader.state == "torn":
                self.torn = Damage("torn", name, self.end_offset, reader.torn_reason)
            self.empty_tail_segments = bases[i + 1 :]
            return
