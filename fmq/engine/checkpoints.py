"""The checkpoint of a running broker: where the next recovery may start."""

from __future__ import annotations

import logging
import os

from fmq.datadir import CHECKPOINT_FILE
from fmq.dedup import DedupWindow
from fmq.errors import StorageError
from fmq.index.dispatcher import Dispatcher
from fmq.index.store import IndexStore
from fmq.log.fileio import FileIO
from fmq.log.log import Log
from fmq.log.placement import now_ms
from fmq.recovery.checkpoint import Checkpoint, write_checkpoint
from fmq.recovery.dedup_file import DEDUP_WINDOW_FILE, remove_window, write_window
from fmq.tx.manager import TxManager

logger = logging.getLogger("fmq.broker")  # the broker's lines keep one logger name


class Checkpointer:
    """Writes checkpoints and remembers the last one written."""

    def __init__(self, path: str, log_: Log, index: IndexStore, dispatcher: Dispatcher,
                 txm: TxManager, io: FileIO, dedup: DedupWindow) -> None:
        self.file = os.path.join(path, CHECKPOINT_FILE)
        self.window_file = os.path.join(path, DEDUP_WINDOW_FILE)
        self.log = log_
        self.index = index
        self.dispatcher = dispatcher
        self.tx = txm
        self.io = io
        self.dedup = dedup
        self.last: Checkpoint | None = None

    def checkpoint(self, final: bool = False) -> Checkpoint:
        """(1) read the applied offset, (2) sync the index, (3) write min(applied, oldest
        open PREPARE, oldest record the dedup window remembers) atomically. ``final`` (the
        broker closes, nothing more is written): save the dedup window instead of keeping
        its records to replay (:mod:`fmq.recovery.dedup_file`)."""
        applied = self.dispatcher.applied_offset
        with self.log.lock:  # the send path changes the window under this lock
            self.dedup.prune(now_ms())
            remembered = self.dedup.oldest_offset()
            save = final and applied == self.log.next_offset
        pins = [self.tx.oldest_prepare_offset()] + ([] if save else [remembered])
        recovery = min([applied] + [o for o in pins if o is not None])
        try:
            if save and remembered is not None:
                write_window(self.window_file, self.dedup, applied, self.io)
            elif save:
                remove_window(self.window_file, self.io)
            self.index.sync()
            cp = write_checkpoint(self.file, recovery, applied, self.log.next_offset, self.io)
        except OSError as exc:
            # The previous checkpoint file is intact (replaced only by rename): recovery
            # just replays more. Say so in FMQ's terms rather than as a bare OSError.
            raise StorageError(
                f"could not write the checkpoint ({exc}); the previous one stays valid and "
                f"nothing acknowledged is at risk. Free space or fix the disk; the next "
                f"checkpoint retries") from exc
        previous, self.last = self.last, cp
        moved = previous is None or (previous.recovery_offset, previous.applied_offset) != (
            recovery, applied)
        # One line when it moved; an idle broker does not repeat itself every interval.
        logger.log(logging.INFO if moved else logging.DEBUG,
                   "checkpoint: recovery offset %d (applied %d)", recovery, applied)
        return cp
