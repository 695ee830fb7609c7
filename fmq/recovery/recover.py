"""Recovery on open, as numbered passes.

1. **Checkpoint**: load it; missing or corrupt → replay from the first segment. The start
   is also pulled back to the index's applied offset when the index is behind it (for
   example a rebuilt index). The dedup window a clean close saved seeds the window when
   the replay starts at or before where it was saved (:mod:`fmq.recovery.dedup_file`).
2. **Scan and redo** from the start to the end of the log. Every record is checked (CRC,
   lengths, its own offset); damage with valid records after it raises
   :class:`~fmq.errors.CorruptLog` naming segment and offset. Each record is redone:

   ===============  ===========================================================
   MESSAGE          index it; remember an idempotent send in the dedup window
                    (:meth:`~fmq.dedup.DedupWindow.remember`, as the send
                    path does)
   PREPARE          open the transaction
   PRE_MESSAGE      body checked by its CRC; attach to its transaction
   REF_MESSAGE      index it; mark its PRE_MESSAGE committed-into-the-queue
   TX_MESSAGE       body checked by its CRC; index it; mark likewise
   COMMIT/ROLLBACK  close the transaction (unknown id: nothing to do)
   OFFSET           set the consumer group's committed offset
   EPOCH            add the term to the epoch history
   TIMER            add its pending timer (a MESSAGE or TIMER naming it removes it)
   ===============  ===========================================================

3. **Cut the torn tail**: zero everything after the last valid record and delete later
   segments that hold nothing valid.
4. **Index beyond the end**: remove index entries for records past the recovered end
   (and before the log's start: retention deleted their segments).
5. **Queue high-water marks**: the next queue offset of every queue, from the index,
   raised to the floors retention recorded for queues it emptied (``queue-floors``).

6. **Complete prepares**: an open transaction with fewer PRE_MESSAGEs than its PREPARE
   announced (a crash cut the prepare short) is listed as incomplete. A *relocated*
   PREPARE (its ``ref_offset`` names the open transaction's PREPARE) replaces the
   original only once all of its PRE_MESSAGEs are read in pass 2; a relocation a crash
   cut short is dropped and the original stays.

Then, once the log is writable, :mod:`fmq.recovery.roll_forward` rolls incomplete prepares
back with a ROLLBACK record and rolls committing transactions forward; the open ones are
handed back to feedback.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from fmq.datadir import CHECKPOINT_FILE, QUEUE_FLOORS_FILE, format_segment_name
from fmq.dedup import DedupWindow
from fmq.errors import CorruptCheckpoint, CorruptLog
from fmq.index.entries import Mark, QueueEntry, TimerChange, index_items, sort_items
from fmq.index.store import IndexStore
from fmq.log.log import Log
from fmq.log.reader import OnCorruption
from fmq.log.record import Record, RecordType
from fmq.log.scanner import LogScanner
from fmq.recovery.checkpoint import read_checkpoint
from fmq.recovery.dedup_file import DEDUP_WINDOW_FILE, read_window
from fmq.recovery.floors import read_floors
from fmq.tx.manager import TxManager
from fmq.tx.redo import redo_transaction_record

log = logging.getLogger(__name__)


_MESSAGE = RecordType.MESSAGE


@dataclass
class RecoveryReport:
    checkpoint: dict | None = None
    checkpoint_problem: str | None = None
    start_offset: int = 0
    end_offset: int = 0
    records_replayed: int = 0
    bytes_replayed: int = 0
    entries_indexed: int = 0
    torn_tail: dict | None = None
    segments_deleted: list[str] = field(default_factory=list)
    index_entries_removed: int = 0
    index_rebuilt: bool = False
    open_transactions: int = 0
    rolled_forward: list[str] = field(default_factory=list)
    #: Transactions whose prepare a crash cut short; roll_forward rolls them back on open.
    incomplete_prepares: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def redo_record(rec: Record, txm: TxManager, entries: list[QueueEntry], ends: list[Mark],
                timers: list[TimerChange], dedup: DedupWindow | None = None) -> None:
    """Apply one record's redo action (table in the module doc); index entries go to
    ``entries``, transaction ends, consumer offsets and terms to ``ends``, timer changes to
    ``timers``, transaction state to ``txm``, idempotent sends to ``dedup``."""
    sort_items(index_items(rec), entries, ends, timers)
    if rec.type == _MESSAGE:  # most records: no transaction
        if dedup is not None and rec.properties:
            dedup.remember(rec)
        return
    redo_transaction_record(rec, txm)  # a transaction's messages are not part of the window


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector: the redo makes a tuple per message, which
    the collector would walk again and again although they form no cycles (12 % of the
    redo's instructions). The previous state is restored, also on an error."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _seed_dedup_window(data_dir: str, dedup: DedupWindow, start: int) -> int | None:
    """Load the window a clean close saved when the replay from ``start`` completes it;
    returns the log offset it was saved at, None when not used, -1 when it is damaged
    (then the whole log is replayed)."""
    try:
        saved = read_window(os.path.join(data_dir, DEDUP_WINDOW_FILE))
    except CorruptCheckpoint as exc:
        log.warning("saved dedup window unusable (%s): replaying the whole log", exc)
        return -1
    if saved is None or start > saved[0]:  # a later checkpoint keeps its records to replay
        return None
    dedup.load(saved[1])
    return saved[0]


def recover(data_dir: str, log_: Log, index: IndexStore, txm: TxManager, *,
            max_record_size: int, batch: int, index_rebuilt: bool,
            progress: Callable[[int, int], None] | None = None,
            dedup: DedupWindow | None = None) -> tuple[RecoveryReport, dict]:
    """Run passes 1-6 (``dedup``: the window pass 2 rebuilds). Returns the report and the
    next queue offset of every queue."""
    t0 = time.monotonic()
    report = RecoveryReport(index_rebuilt=index_rebuilt)
    first = log_.first_offset

    # Pass 1: checkpoint.
    start = first
    try:
        cp = read_checkpoint(os.path.join(data_dir, CHECKPOINT_FILE))
    except CorruptCheckpoint as exc:
        cp = None
        report.checkpoint_problem = str(exc)
        log.warning("checkpoint unusable (%s): replaying the whole log", exc)
    if cp is not None:
        report.checkpoint = cp.to_dict()
        start = cp.recovery_offset
    applied = index.applied_offset()
    if applied is None:
        start = first
    else:
        start = min(start, applied)
    last_end = log_.segments[-1].end if log_.segments else first
    if not first <= start <= last_end:
        log.warning("checkpoint offset %d outside the log [%d, %d]: replaying the whole log",
                    start, first, last_end)
        start = first
    saved_at = _seed_dedup_window(data_dir, dedup, start) if dedup is not None else None
    if saved_at == -1:
        start = first
    report.start_offset = start

    # Pass 2: scan and redo.
    # The records come in runs; on the compiled path a run of plain messages comes as their
    # queue entries, decoded without a Record, taken here as a whole.
    scanner = LogScanner(log_.directory, start_offset=start, max_record_size=max_record_size,
                         on_corruption=OnCorruption.RAISE, copy_body=False,
                         entry_type=QueueEntry, batched=True)
    entries: list[QueueEntry] = []
    ends: list[Mark] = []
    timers: list[TimerChange] = []
    replayed = 0
    with collector_paused():
        for run in scanner:
            replayed += len(run)
            last = run[-1]
            if type(last) is QueueEntry:
                entries += run
                end_offset = last.source_offset + last.data_size
            else:
                for rec in run:
                    redo_record(rec, txm, entries, ends, timers, dedup)
                end_offset = last.end_offset
            if len(entries) + len(ends) + len(timers) < batch:
                continue
            index.apply(entries, end_offset, ends, timers)
            report.entries_indexed += len(entries)
            entries, ends, timers = [], [], []
            if progress is not None:
                progress(end_offset - start, last_end - start)
    end = scanner.end_offset if log_.segments else first
    if cp is not None and first <= end < cp.applied_offset:
        # The checkpoint saw the log durable (and indexed) up to applied_offset: valid data
        # stopping before that is lost synced data, not a torn tail. Never cut it silently.
        base = max((s.base for s in log_.segments if s.base <= end), default=first)
        raise CorruptLog(format_segment_name(base), end,
                         f"the log's valid records end at {end}, but the checkpoint recorded "
                         f"them durable up to {cp.applied_offset}: synced data is missing")
    index.apply(entries, end, ends, timers)
    if saved_at is not None and saved_at > end:  # an operator cut the log since
        dedup.drop_from(end)
    report.entries_indexed += len(entries)
    report.records_replayed = replayed
    report.bytes_replayed = end - start
    report.end_offset = end

    # Pass 3: cut the torn tail.
    if scanner.torn is not None or scanner.empty_tail_segments:
        report.torn_tail = scanner.torn.to_dict() if scanner.torn else None
        report.segments_deleted = log_.truncate(end)
        log.warning("cut the log at %d (torn tail: %s; empty segments deleted: %s)", end,
                    report.torn_tail, report.segments_deleted)

    # Pass 4: index entries beyond the end, and before the start (a crash between
    # retention's segment deletion and its index cleanup leaves entries pointing there).
    report.index_entries_removed = index.remove_from(end)
    report.index_entries_removed += index.remove_before(first)
    index.set_applied_offset(end)

    # Pass 5: queue high-water marks, raised to the floors of queues retention emptied.
    index.apply_floors(read_floors(os.path.join(data_dir, QUEUE_FLOORS_FILE)))
    queue_next = {q: hi for q, (_lo, hi) in index.all_queues().items()}
    # Pass 6: prove every open prepare complete. One whose PRE_MESSAGEs a crash cut short
    # (fewer than its PREPARE announced) can never be committed: roll_forward rolls it back.
    # A relocated copy a crash cut short is dropped: its original is whole and stays.
    for copy in txm.relocating.values():
        log.warning("transaction %r: its relocation at %d was cut short (%d of %d messages); "
                    "it keeps its earlier copy", copy.tx_id, copy.prepare_offset,
                    len(copy.messages), copy.expected_messages)
    txm.relocating.clear()
    for tx in txm.open.values():
        tx.prepared = tx.complete
        if not tx.complete:
            report.incomplete_prepares.append(tx.tx_id)
    report.open_transactions = len(txm.open)
    report.seconds = time.monotonic() - t0
    return report, queue_next
