"""Where the dispatcher's index items come from: its hand-off queue (the items of appended
records, in log order), or the flushed log itself, read through the log scanner."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from fmq.errors import BadRecord
from fmq.index.entries import IndexItem, Mark, QueueEntry, TimerChange, index_items, sort_items
from fmq.log.log import Log
from fmq.log.reader import OnCorruption, OpenSegmentSource
from fmq.log.record import RecordType
from fmq.log.scanner import LogScanner

#: Writes one batch: (entries, the offset applied up to, transaction ends and offsets, timers).
Apply = Callable[[list[QueueEntry], int, list[Mark], list[TimerChange]], None]


def take_pending(pending: deque[tuple[int, IndexItem]], target: int
                 ) -> tuple[list[QueueEntry], list[Mark], list[TimerChange]]:
    """Take from the hand-off queue the items of records ending at or below ``target``."""
    entries: list[QueueEntry] = []
    ends: list[Mark] = []
    timers: list[TimerChange] = []
    while pending and pending[0][0] <= target:
        sort_items((pending.popleft()[1],), entries, ends, timers)
    return entries, ends, timers


def catch_up(log_: Log, offset: int, target: int, max_record_size: int, batch: int,
             apply: Apply) -> None:
    """Index the flushed log from ``offset`` up to ``target``, read through the log scanner
    over the log's open segments, ``apply``-ing every ``batch`` items. Only flushed records
    are read: the scan stops at ``target``, before any byte a flush has not covered yet."""
    entries: list[QueueEntry] = []
    ends: list[Mark] = []
    timers: list[TimerChange] = []
    log_.segment_for(offset)  # OffsetOutOfRange when retention deleted it
    with log_.lock:
        segments = list(log_.segments)
    scanner = LogScanner(source=OpenSegmentSource(segments), start_offset=offset,
                         max_record_size=max_record_size,
                         on_corruption=OnCorruption.RAISE, copy_body=False)
    for rec in scanner:
        if rec.type == RecordType.FILLER:
            offset = log_.segment_for(rec.log_offset).end  # the rest is unused
        else:
            offset = rec.end_offset
            sort_items(index_items(rec), entries, ends, timers)
            if len(entries) + len(ends) + len(timers) >= batch:
                apply(entries, offset, ends, timers)
                entries, ends, timers = [], [], []
        if offset >= target:
            break
    if offset < target:
        torn = scanner.torn
        raise BadRecord(offset, torn.reason if torn else
                        f"the log ends at {offset}, before the flushed offset {target}")
    apply(entries, offset, ends, timers)
