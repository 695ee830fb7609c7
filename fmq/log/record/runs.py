"""The reference of ``decode_run``: decode the records lying one after the other in a
buffer with one call, so that a scan pays its per-record Python steps once per run.

The compiled twin (``DecodeAt.run`` in ``_record_c.pyx``) appends the same records, but may
stop earlier: before the first position it does not take (a buffer type or argument it
leaves to the reference, a record failing a check). A scan therefore decodes the position
a run stopped at with ``decode_at`` itself, which returns the record or raises the error
the reference gives (:meth:`fmq.log.reader.SegmentReader.records`).
"""

from __future__ import annotations

from collections.abc import Callable

from fmq.errors import BadRecord, IncompleteRecord
from fmq.log.record.layout import Record, RecordType


def decode_run(decode_at: Callable[..., Record], buf, pos: int, base: int,
               max_record_size: int, copy_body: bool, end: int, max_records: int,
               out: list[Record]) -> int:
    """Append to ``out`` the records ``decode_at`` returns at ``pos`` and after it while each
    starts before ``end``: up to ``max_records``, up to and including a FILLER, stopping
    before the first position that holds no valid record. Returns the position after the
    last record appended."""
    taken = 0
    while pos < end and taken < max_records:
        try:
            rec = decode_at(buf, pos, base + pos, max_record_size, copy_body)
        except (BadRecord, IncompleteRecord):
            break
        out.append(rec)
        taken += 1
        pos += rec.size
        if rec.type == RecordType.FILLER:
            break
    return pos
