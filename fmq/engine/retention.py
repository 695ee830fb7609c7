"""Retention: delete whole old segments, relocating the open transactions and the pending
timers that pin them and writing again at the log head the consumer offsets whose latest
record they hold, and roll back transactions left open longer than ``tx_timeout_ms``."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from fmq.config import BrokerConfig
from fmq.datadir import QUEUE_FLOORS_FILE
from fmq.engine.checkpoints import Checkpointer
from fmq.engine.offsets import ConsumerOffsets
from fmq.engine.timer_pinning import TimerPinning
from fmq.engine.timers import Timers
from fmq.errors import FMQError
from fmq.index.store import IndexStore
from fmq.log.fileio import FileIO
from fmq.log.log import Log
from fmq.log.segment import Segment
from fmq.recovery.floors import write_floors
from fmq.tx.manager import TxManager
from fmq.tx.relocation import TxRelocator
from fmq.tx.state import TxState

logger = logging.getLogger("fmq.broker")  # the broker's lines keep one logger name


class Retention:
    """Retention and the transaction timeout of one broker. ``rollback(tx_id)`` ends a
    transaction the way the broker's own method does."""

    def __init__(self, path: str, config: BrokerConfig, log_: Log, index: IndexStore,
                 txm: TxManager, relocator: TxRelocator, checkpointer: Checkpointer, io: FileIO,
                 rollback: Callable[[str], TxState], offsets: ConsumerOffsets,
                 timers: Timers) -> None:
        self.floors_file = os.path.join(path, QUEUE_FLOORS_FILE)
        self.config = config
        self.log = log_
        self.index = index
        self.tx = txm
        self.relocator = relocator
        self.checkpointer = checkpointer
        self.timers = timers
        self.io = io
        self.rollback = rollback
        self.offsets = offsets
        self.timeouts = 0  # transactions tx_timeout_ms rolled back
        self.passes = 0  # retention passes run
        self.timer_pinning = TimerPinning(config.retention_bytes, log_, index)

    def enforce(self, now: float | None = None) -> list[str]:
        """See :meth:`fmq.engine.broker.Broker.enforce_retention`."""
        cfg = self.config
        if not cfg.retention_ms and not cfg.retention_bytes:
            return []
        self.passes += 1
        self.timer_pinning.begin_pass()
        floor = self._floor()
        now = time.time() if now is None else now
        deleted = []
        relocated: set[str] = set()
        head = self.log.next_offset  # timers stored from here on moved in this pass
        moved_timers = False
        while True:
            segs = list(self.log.segments)
            if len(segs) < 2:
                break
            seg = segs[0]
            if seg is self.log.active_segment:
                break
            total = sum(s.size for s in segs)
            too_old = bool(cfg.retention_ms) and (
                now - os.stat(seg.path).st_mtime) * 1000 > cfg.retention_ms
            too_big = bool(cfg.retention_bytes) and total > cfg.retention_bytes
            if not (too_old or too_big):
                break
            if seg.end > floor:
                # Open transactions and pending timers in this segment pin it (and every
                # later one): move them to the log head, then the checkpoint can pass it.
                # A follower writes nothing of its own: it waits for its primary's move.
                if cfg.follow:
                    break
                timers_pin = self.timer_pinning.pin(seg.end)
                if timers_pin and not self.timer_pinning.may_move(total, too_old):
                    break
                if not self._relocate_pinning(seg, relocated):
                    break
                if timers_pin and self.timers.relocate_before(min(seg.end, head)):
                    moved_timers = True
                floor = self._floor()
                if seg.end > floor:
                    break
            if not deleted:  # before the first deletion: queues it empties keep their marks
                write_floors(self.floors_file,
                             {q: hi for q, (_lo, hi) in self.index.all_queues().items()},
                             self.io)
            # The segment is indexed (it ends at or before the floor): the offsets whose
            # latest record it holds are read from the index and written at the head. A
            # follower writes nothing: it keeps the segment until its primary's copies arrive.
            if cfg.follow:
                if self.offsets.pinned_before(seg.end):
                    break
            else:
                self.offsets.keep_before(seg.end)
            self.log.delete_segment(seg)
            deleted.append(seg.name)
        if deleted:
            self.index.remove_before(self.log.first_offset)
            logger.info("retention deleted %d segments: %s", len(deleted), ", ".join(deleted))
        if moved_timers:
            self.timer_pinning.moved()
        segs = list(self.log.segments)
        self.timer_pinning.end_pass(sum(s.size for s in segs), segs[0].end if segs else 0)
        return deleted

    def _floor(self) -> int:
        """The lowest offset retention must keep: the checkpoint's recovery offset (taken
        now), which is at or before every open transaction's PREPARE, and the oldest
        pending timer (``enforce`` moves those of a segment it deletes to the log head)."""
        floor = self.checkpointer.checkpoint().recovery_offset
        oldest = self.tx.oldest_prepare_offset()
        timer = self.index.timers.summary()["oldest_offset"]
        return min(x for x in (floor, oldest, timer) if x is not None)

    def _relocate_pinning(self, seg: Segment, done: set[tuple[str, str]]) -> bool:
        """Relocate the open transactions whose PREPARE lies before ``seg.end``. False when
        one of them cannot move (committing, being ended, or already moved in this run:
        a transaction larger than the retention limit moves at most once per run)."""
        with self.tx.lock:
            pinning = [t for t in self.tx.open.values() if t.prepare_offset < seg.end]
        if not pinning:
            return True  # the floor is the index's progress, not a transaction
        for tx in sorted(pinning, key=lambda t: t.prepare_offset):
            if tx.key in done or not self.relocator.relocate(tx):
                return False
            done.add(tx.key)
        return True

    def roll_back_timed_out(self) -> None:
        """``tx_timeout_ms``: roll back transactions open longer than that."""
        limit = self.config.tx_timeout_ms / 1000.0
        now = time.monotonic()
        with self.tx.lock:
            due = [t for t in self.tx.open.values() if t.state == TxState.OPEN and t.prepared
                   and now - t.registered_at > limit]
        for tx in due:
            try:
                self.rollback(tx.tx_id, tx.producer_group)
            except FMQError as exc:  # committed meanwhile (conflict), closed broker, ...
                logger.info("tx_timeout_ms: transaction %r not rolled back: %s", tx.tx_id, exc)
                continue
            self.timeouts += 1
            logger.warning("rolled back transaction %r of group %r: open for more than "
                           "tx_timeout_ms (%d ms) with no decision", tx.tx_id,
                           tx.producer_group, self.config.tx_timeout_ms)
