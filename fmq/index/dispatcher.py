"""The dispatcher: tails the *flushed* part of the log and applies it to the index.

It never reads past the durable offset (RocketMQ #8239: indexing unflushed data let
consumers read messages a crash then lost). Each batch of entries and the offset applied up
to go into one LMDB transaction, so a crash leaves the index at a batch boundary and the
redo pass re-applies from the checkpoint idempotently.
"""

from __future__ import annotations

import logging
import threading

from fmq.errors import BadRecord, TornRecord
from fmq.index.entries import QueueEntry, TxEnd, queue_entry, tx_end
from fmq.index.store import IndexStore
from fmq.log.log import Log
from fmq.log.record import RecordType, decode

log = logging.getLogger(__name__)

READ_CHUNK = 4 << 20


class Dispatcher:
    def __init__(self, log_: Log, index: IndexStore, batch: int, max_record_size: int,
                 start_offset: int) -> None:
        self.log = log_
        self.index = index
        self.batch = batch
        self.max_record_size = max_record_size
        self._applied = start_offset
        self._cond = threading.Condition()
        self._target = start_offset
        self._stop = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="fmq-dispatcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def applied_offset(self) -> int:
        return self._applied

    def notify_flushed(self, offset: int) -> None:
        """The log calls this after each flush (log.on_flushed)."""
        with self._cond:
            if offset > self._target:
                self._target = offset
                self._cond.notify_all()

    def wait_applied(self, offset: int, timeout: float | None = None) -> bool:
        """Block until the index covers the log below ``offset``."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._applied >= offset or self.error is not None or self._stop,
                timeout) and self._applied >= offset

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while self._target <= self._applied and not self._stop:
                        self._cond.wait()
                    if self._stop and self._target <= self._applied:
                        return
                    target = self._target
                self._catch_up(target)
        except BaseException as exc:  # the broker reports it in stats and on close
            log.exception("dispatcher stopped: %s", exc)
            with self._cond:
                self.error = exc
                self._cond.notify_all()

    def _catch_up(self, target: int) -> None:
        offset = self._applied
        entries: list[QueueEntry] = []
        ends: list[TxEnd] = []
        while offset < target:
            seg = self.log.segment_for(offset)
            end = min(target, seg.end)
            buf = seg.read(offset - seg.base, min(READ_CHUNK, end - offset))
            pos = 0
            while pos < len(buf):
                try:
                    rec = decode(buf, pos, base_offset=offset,
                                 max_record_size=self.max_record_size, copy_body=False)
                except TornRecord:
                    if pos == 0:
                        raise
                    break  # the record continues past this chunk: read it next round
                except BadRecord:
                    raise
                pos += rec.size
                if rec.type == RecordType.FILLER:
                    pos = seg.end - offset  # the rest of the segment is unused
                    break
                e = queue_entry(rec)
                if e is not None:
                    entries.append(e)
                else:
                    t = tx_end(rec)
                    if t is not None:
                        ends.append(t)
                if len(entries) + len(ends) >= self.batch:
                    self._apply(entries, offset + pos, ends)
                    entries, ends = [], []
            offset += pos
            if offset >= seg.end and seg.end < target:
                offset = seg.end
        self._apply(entries, offset, ends)

    def _apply(self, entries: list[QueueEntry], applied: int, ends: list[TxEnd]) -> None:
        self.index.apply(entries, applied, ends)
        with self._cond:
            self._applied = applied
            self._cond.notify_all()

    def stop(self) -> None:
        """Finish applying what is flushed, then stop the thread."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()
