"""Recovery on open, as numbered passes, each a method of :class:`Recovery`.

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
    return Recovery(data_dir, log_, index, txm, max_record_size=max_record_size, batch=batch,
                    index_rebuilt=index_rebuilt, progress=progress, dedup=dedup).run()


class Recovery:
    """One recovery of a data directory: each pass of the module doc is a method, run in
    order by :meth:`run`; what a pass finds that a later one needs is kept on the instance
    (the replay's start, its end, the scanner that found the torn tail)."""

    def __init__(self, data_dir: str, log_: Log, index: IndexStore, txm: TxManager, *,
                 max_record_size: int, batch: int, index_rebuilt: bool,
                 progress: Callable[[int, int], None] | None = None,
                 dedup: DedupWindow | None = None) -> None:
        self.data_dir = data_dir
        self.log = log_
        self.index = index
        self.txm = txm
        self.max_record_size = max_record_size
        self.batch = batch
        self.progress = progress
        self.dedup = dedup
        self.report = RecoveryReport(index_rebuilt=index_rebuilt)
        self.first = log_.first_offset
        #: Where the log's segments end before recovery cuts anything.
        self.last_end = log_.segments[-1].end if log_.segments else self.first
        self.checkpoint = None
        #: The log offset the saved dedup window was saved at (None: not used).
        self.saved_at: int | None = None

    def run(self) -> tuple[RecoveryReport, dict]:
        t0 = time.monotonic()
        start = self.replay_start()
        scanner = LogScanner(self.log.directory, start_offset=start,
                             max_record_size=self.max_record_size,
                             on_corruption=OnCorruption.RAISE, copy_body=False,
                             queue_entries=True, batched=True)
        end = self.scan_and_redo(scanner, start)
        self.cut_torn_tail(scanner, end)
        self.remove_index_outside(end)
        queue_next = self.queue_high_water_marks()
        self.complete_prepares()
        self.report.seconds = time.monotonic() - t0
        return self.report, queue_next

    def replay_start(self) -> int:
        """Pass 1: the offset the replay starts at, from the checkpoint, pulled back to the
        index's applied offset; seeds the dedup window a clean close saved."""
        report, first = self.report, self.first
        start = first
        try:
            cp = read_checkpoint(os.path.join(self.data_dir, CHECKPOINT_FILE))
        except CorruptCheckpoint as exc:
            cp = None
            report.checkpoint_problem = str(exc)
            log.warning("checkpoint unusable (%s): replaying the whole log", exc)
        if cp is not None:
            report.checkpoint = cp.to_dict()
            start = cp.recovery_offset
        self.checkpoint = cp
        applied = self.index.applied_offset()
        if applied is None:
            start = first
        else:
            start = min(start, applied)
        if not first <= start <= self.last_end:
            log.warning("checkpoint offset %d outside the log [%d, %d]: replaying the whole "
                        "log", start, first, self.last_end)
            start = first
        if self.dedup is not None:
            self.saved_at = _seed_dedup_window(self.data_dir, self.dedup, start)
        if self.saved_at == -1:
            start = first
        report.start_offset = start
        return start

    def scan_and_redo(self, scanner: LogScanner, start: int) -> int:
        """Pass 2: redo every record from ``start`` into the index, the transactions and the
        dedup window; returns the end of the last valid record."""
        # The records come in runs; on the compiled path a run of plain messages comes as
        # their queue entries, decoded without a Record, taken here as a whole.
        index, report, txm, dedup = self.index, self.report, self.txm, self.dedup
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
                if len(entries) + len(ends) + len(timers) < self.batch:
                    continue
                index.apply(entries, end_offset, ends, timers)
                report.entries_indexed += len(entries)
                entries, ends, timers = [], [], []
                if self.progress is not None:
                    self.progress(end_offset - start, self.last_end - start)
        first, cp = self.first, self.checkpoint
        end = scanner.end_offset if self.log.segments else first
        if cp is not None and first <= end < cp.applied_offset:
            # The checkpoint saw the log durable (and indexed) up to applied_offset: valid
            # data stopping before that is lost synced data, not a torn tail. Never cut it
            # silently.
            base = max((s.base for s in self.log.segments if s.base <= end), default=first)
            raise CorruptLog(format_segment_name(base), end,
                             f"the log's valid records end at {end}, but the checkpoint "
                             f"recorded them durable up to {cp.applied_offset}: synced data "
                             "is missing")
        index.apply(entries, end, ends, timers)
        if self.saved_at is not None and self.saved_at > end:  # an operator cut the log since
            dedup.drop_from(end)
        report.entries_indexed += len(entries)
        report.records_replayed = replayed
        report.bytes_replayed = end - start
        report.end_offset = end
        return end

    def cut_torn_tail(self, scanner: LogScanner, end: int) -> None:
        """Pass 3: zero what follows the last valid record, delete segments after it that
        hold nothing valid."""
        if scanner.torn is None and not scanner.empty_tail_segments:
            return
        report = self.report
        report.torn_tail = scanner.torn.to_dict() if scanner.torn else None
        report.segments_deleted = self.log.truncate(end)
        log.warning("cut the log at %d (torn tail: %s; empty segments deleted: %s)", end,
                    report.torn_tail, report.segments_deleted)

    def remove_index_outside(self, end: int) -> None:
        """Pass 4: index entries beyond the end, and before the start (a crash between
        retention's segment deletion and its index cleanup leaves entries pointing there)."""
        removed = self.index.remove_from(end) + self.index.remove_before(self.first)
        self.report.index_entries_removed = removed
        self.index.set_applied_offset(end)

    def queue_high_water_marks(self) -> dict:
        """Pass 5: the next queue offset of every queue, raised to the floors of queues
        retention emptied."""
        self.index.apply_floors(read_floors(os.path.join(self.data_dir, QUEUE_FLOORS_FILE)))
        return {q: hi for q, (_lo, hi) in self.index.all_queues().items()}

    def complete_prepares(self) -> None:
        """Pass 6: prove every open prepare complete. One whose PRE_MESSAGEs a crash cut
        short (fewer than its PREPARE announced) can never be committed: roll_forward rolls
        it back. A relocated copy a crash cut short is dropped: its original is whole and
        stays."""
        txm = self.txm
        for copy in txm.relocating.values():
            log.warning("transaction %r: its relocation at %d was cut short (%d of %d "
                        "messages); it keeps its earlier copy", copy.tx_id,
                        copy.prepare_offset, len(copy.messages), copy.expected_messages)
        txm.relocating.clear()
        for tx in txm.open.values():
            tx.prepared = tx.complete
            if not tx.complete:
                self.report.incomplete_prepares.append(tx.tx_id)
        self.report.open_transactions = len(txm.open)
