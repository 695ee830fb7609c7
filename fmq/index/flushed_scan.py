"""Indexing the flushed log by reading it: the scan both index writers use when they do not
have the records in memory (the dispatcher's catch-up, the indexer process's only path).

Only flushed records are read: the scan stops at ``target``, before any byte a flush has not
covered yet. Items go to ``apply`` in batches of about ``batch`` items, each with the log
offset it covers, so a crash leaves the index at a batch boundary.
"""

from __future__ import annotations

from collections.abc import Callable

from fmq.errors import BadRecord
from fmq.index.entries import Mark, QueueEntry, TimerChange, index_items, sort_items
from fmq.log.reader import OnCorruption, SegmentSource
from fmq.log.record import RecordType
from fmq.log.scanner import LogScanner

#: ``apply(entries, applied offset, marks, timers)``: one index transaction.
Apply = Callable[[list[QueueEntry], int, list[Mark], list[TimerChange]], None]


def index_flushed(*, source: SegmentSource, start: int, target: int, max_record_size: int,
                  batch: int, segment_end: Callable[[int], int], apply: Apply) -> int:
    """Index the log read from ``source`` from ``start`` up to ``target`` (a record
    boundary a flush covered); ``segment_end(offset)`` is where the segment holding
    ``offset`` ends (a FILLER covers the rest of it). Returns the offset applied up to.
    Raises BadRecord when the log ends (or is torn) before ``target``.

    The records come in runs, as recovery's redo reads them: on the compiled path a run of
    plain messages comes as their queue entries, built in C without a ``Record`` each
    (:class:`~fmq.log.scanner.LogScanner` ``queue_entries``). A run may reach past ``target``
    (records written, not yet flushed): it is cut there."""
    offset = start
    entries: list[QueueEntry] = []
    ends: list[Mark] = []
    timers: list[TimerChange] = []
    scanner = LogScanner(source=source, start_offset=offset, max_record_size=max_record_size,
                         on_corruption=OnCorruption.RAISE, copy_body=False,
                         queue_entries=True, batched=True)
    for run in scanner:
        last = run[-1]
        if type(last) is QueueEntry:
            cut = last.source_offset + last.data_size > target
            if cut:
                run = [e for e in run if e.source_offset + e.data_size <= target]
            if run:
                entries += run
                last = run[-1]
                offset = last.source_offset + last.data_size
            if cut:
                break
        else:
            for rec in run:
                if rec.type == RecordType.FILLER:
                    offset = segment_end(rec.log_offset)  # the rest is unused
                else:
                    offset = rec.end_offset
                    sort_items(index_items(rec), entries, ends, timers)
                if offset >= target:
                    break
        if offset >= target:
            break
        if len(entries) + len(ends) + len(timers) >= batch:
            apply(entries, offset, ends, timers)
            entries, ends, timers = [], [], []
    if offset < target:
        torn = scanner.torn
        raise BadRecord(offset, torn.reason if torn else
                        f"the log ends at {offset}, before the flushed offset {target}")
    apply(entries, offset, ends, timers)
    return offset
