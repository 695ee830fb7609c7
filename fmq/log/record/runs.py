"""The references of ``decode_run`` and ``decode_entry_run``: decode the records lying one
after the other in a buffer with one call, so that a scan pays its per-record Python steps
once per run.

The compiled twins (``DecodeAt.run`` and ``entry_run`` in ``_record_c.pyx``) append the
same items, but may
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


def plain_message(rec: Record) -> bool:
    """Whether ``rec`` is a MESSAGE whose only index item is its queue entry, computable
    from the header, the topic and the key: no properties field, no tags, no timer."""
    return (rec.type == RecordType.MESSAGE and rec.properties is None and rec.tags is None
            and rec.ref_offset < 0)


def decode_entry_run(decode_at: Callable[..., Record], buf, pos: int, base: int,
                     max_record_size: int, copy_body: bool, end: int, max_records: int,
                     entry_type: type, out: list) -> int:
    """As :func:`decode_run`, but each plain MESSAGE (:func:`plain_message`) is appended as
    an ``entry_type`` tuple of (topic, queue id, queue offset, log offset, size, 0, store
    time, key, log offset): its consume-queue entry (``fmq.index.derive.queue_entry``).
    A run holds entries only or records only: it stops before the first item of the other
    kind, so that its reader can take a run of entries as a whole."""
    taken, entries = 0, None
    while pos < end and taken < max_records:
        one: list[Record] = []
        after = decode_run(decode_at, buf, pos, base, max_record_size, copy_body, end, 1, one)
        if not one:
            break
        rec = one[0]
        plain = plain_message(rec)
        if entries is not None and plain != entries:
            break
        entries = plain
        out.append(tuple.__new__(entry_type, (
            rec.topic, rec.queue_id, rec.queue_offset, rec.log_offset, rec.size, 0,
            rec.store_time, rec.key, rec.log_offset)) if plain else rec)
        taken += 1
        pos = after
        if rec.type == RecordType.FILLER:
            break
    return pos
