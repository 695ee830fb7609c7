"""The unit of log shipping: a run of whole records from one segment, as raw bytes.

The primary cuts a chunk from its *flushed* log (never a byte that is not durable on the
primary) at record boundaries, inside one segment, ending at a FILLER when it reaches
one; the follower checks every record (CRC-32C, magic, its own log offset) before a byte
of the chunk is written. Both sides use only :mod:`fmq.log.record`: the chunk is the log's
own format, so the copies are byte-identical.
"""

from __future__ import annotations

from dataclasses import dataclass

from fmq.errors import BadRecord, IncompleteRecord, ReplicaBehindRetention, ReplicaDiverged
from fmq.log.log import Log
from fmq.log.record import HEADER_SIZE, Record, RecordType, check, decode, record_length

_TYPE_POSITION = 11  # the record type's byte in the header


@dataclass(frozen=True)
class Chunk:
    """Bytes ``[offset, offset + len(data))`` of the segment ``[segment_base,
    segment_base + segment_size)``; empty ``data`` when nothing new is durable."""

    offset: int
    segment_base: int
    segment_size: int
    data: bytes


def read_chunk(log: Log, from_offset: int, max_bytes: int) -> Chunk:
    """The whole records the primary holds durably from ``from_offset``: at most
    ``max_bytes`` (at least one record), inside one segment.

    Raises ReplicaBehindRetention when ``from_offset`` was deleted, ReplicaDiverged when it
    is past the durable end or not the start of a valid record here."""
    end = log.flushed_offset
    if from_offset < log.first_offset:
        raise ReplicaBehindRetention(from_offset, log.first_offset)
    if from_offset > end:
        raise ReplicaDiverged(from_offset, end)
    if from_offset == end:
        return Chunk(from_offset, 0, 0, b"")
    seg = log.segment_for(from_offset)
    position = from_offset - seg.base
    data = seg.read(position, min(min(end, seg.end) - from_offset, max(max_bytes, HEADER_SIZE)))
    first = record_length(data, 0)
    if HEADER_SIZE <= first <= seg.size - position and first > len(data):
        data = seg.read(position, first)  # one record larger than max_bytes
    try:
        check(data, 0, base_offset=from_offset, max_record_size=seg.size)
    except (BadRecord, IncompleteRecord):
        raise ReplicaDiverged(from_offset, end) from None
    cut = 0
    while cut + HEADER_SIZE <= len(data):
        length = record_length(data, cut)
        if length < HEADER_SIZE or cut + length > len(data):
            break
        cut += length
        if data[cut - length + _TYPE_POSITION] == RecordType.FILLER:
            break  # the rest of the segment is unused
    return Chunk(from_offset, seg.base, seg.size, data[:cut])


def verify_chunk(data: bytes, offset: int, segment_base: int, segment_size: int,
                 max_record_size: int) -> list[Record]:
    """Decode every record of a shipped chunk that starts at log offset ``offset``.

    Raises BadRecord (CRC, magic, offset, lengths) or IncompleteRecord (bytes end inside a
    record) for the first record that fails: then nothing of the chunk may be written.
    A FILLER may only end the chunk; the chunk must lie inside its segment."""
    if not segment_base <= offset or offset + len(data) > segment_base + segment_size:
        raise BadRecord(offset, f"a chunk of {len(data)} bytes does not fit its segment "
                                f"{segment_base}+{segment_size}")
    view = memoryview(data)
    records: list[Record] = []
    pos = 0
    while pos < len(data):
        if records and records[-1].type == RecordType.FILLER:
            raise BadRecord(offset + pos, "bytes after a FILLER in a shipped chunk")
        rec = decode(view, pos, base_offset=offset, max_record_size=max_record_size)
        records.append(rec)
        pos += rec.size
    return records
