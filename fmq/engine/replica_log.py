"""A broker's part in a broker group (``Broker.replica``): the log ends a primary ships
from and a follower copies to, appending a copied chunk or a term's EPOCH record, the
epoch history, and the high watermark consumers read up to.

Replication and the server use this facade; the log, the index, the dispatcher and the
transaction manager behind it stay the engine's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fmq.dedup import DedupWindow
from fmq.engine.visibility import Visibility
from fmq.errors import LogFailed, ReplicaDiverged
from fmq.index.dispatcher import Dispatcher
from fmq.index.entries import EpochEntry
from fmq.index.store import IndexStore
from fmq.log.log import Log
from fmq.log.placement import now_ms
from fmq.log.record import Record, RecordType, encoded_length
from fmq.tx.manager import TxManager
from fmq.tx.redo import redo_transaction_record


class ReplicaLog:
    """The replication operations of one open broker."""

    def __init__(self, *, log_: Log, index: IndexStore, dispatcher: Dispatcher,
                 tx: TxManager, dedup: DedupWindow, visibility: Visibility,
                 max_record_size: int) -> None:
        #: The log whose flushed records are shipped (``fmq.replication.chunks.read_chunk``
        #: reads it); written here only through :meth:`append_copy` and
        #: :meth:`append_epoch`.
        self.log = log_
        self._index = index
        self._dispatcher = dispatcher
        self._tx = tx
        self._dedup = dedup
        self._visibility = visibility
        self._max_record_size = max_record_size

    # ------------------------------------------------------------------ log ends

    @property
    def flushed_offset(self) -> int:
        """The durable end of this node's log."""
        return self.log.flushed_offset

    @property
    def first_offset(self) -> int:
        """The first offset retention kept."""
        return self.log.first_offset

    @property
    def first_segment_size(self) -> int:
        """The size of the first retained segment (0: none); a bootstrapping follower
        creates its first segment with it."""
        segments = self.log.segments
        return segments[0].size if segments else 0

    def add_flush_listener(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(offset)`` after every sync flush too (from the flushing thread),
        after what was called before."""
        previous = self.log.on_flushed

        def on_flushed(offset: int) -> None:
            if previous is not None:
                previous(offset)
            listener(offset)

        self.log.on_flushed = on_flushed

    # ------------------------------------------------------------------ terms

    def epoch_history(self) -> list[EpochEntry]:
        """The terms the log records (EPOCH records), oldest first."""
        return self._index.epoch_history()

    def append_epoch(self, epoch: int, node: str, index_wait_s: float) -> EpochEntry:
        """Append the EPOCH record of term ``epoch`` started by ``node``, fdatasync it and
        wait (up to ``index_wait_s``) until the epoch history has it."""
        record = Record(RecordType.EPOCH, store_time=now_ms(), queue_offset=epoch,
                        producer_group=node)
        log_ = self.log
        with log_.lock:
            log_.reserve_locked([encoded_length(record)])
            log_.append_locked(record)
            end = log_.next_offset
        log_.wait_durable(end, sync=True)
        dispatcher = self._dispatcher
        if not dispatcher.wait_applied(end, index_wait_s):
            raise LogFailed(f"the EPOCH record of epoch {epoch} is durable but the index did "
                            f"not take it ({dispatcher.error or dispatcher.failing}); "
                            f"restart the server (recovery indexes it)")
        return EpochEntry(epoch, record.log_offset, node)

    # ------------------------------------------------------------------ a follower's copy

    def append_copy(self, start: int, segment_base: int, segment_size: int, data: bytes,
                    records: Sequence[Record], primary_end: int) -> int | None:
        """Append a checked chunk of the primary's log at ``start`` (this log's end) and
        fdatasync it; its transaction records and idempotent sends are taken as recovery
        takes them. Returns the newest epoch among the records (None: no EPOCH). Raises
        ReplicaDiverged when the primary's segments are not laid out as this log's."""
        log_ = self.log
        epoch = None
        with log_.lock:
            if log_.next_offset != start:  # only the follower's thread writes its log
                raise LogFailed(f"the follower's log end moved from {start} to "
                                f"{log_.next_offset} while it fetched")
            try:
                log_.append_copy_locked(segment_base, segment_size, data, records)
            except ValueError:
                raise ReplicaDiverged(start, primary_end) from None
            dedup, tx = self._dedup, self._tx  # the log lock guards the window
            with tx.lock:
                for rec in records:
                    redo_transaction_record(rec, tx)
                    if rec.type == RecordType.EPOCH:
                        epoch = rec.queue_offset
                    elif rec.properties:  # an idempotent send: a promoted node knows it
                        dedup.remember(rec)
        log_.wait_durable(log_.next_offset, sync=True)
        return epoch

    # ------------------------------------------------------------------ high watermark

    @property
    def visible_end(self) -> int | None:
        """The offset consumers read up to (None: not gated, the whole durable log)."""
        return self._visibility.end

    def gate_visibility(self) -> None:
        """Hide what the log appends from now on until :meth:`advance_visible` passes it."""
        self._visibility.gate(self.log)

    def advance_visible(self, offset: int) -> None:
        """Let consumers read up to ``offset``."""
        self._visibility.advance(offset)

    def resume_visible_at(self, end: int) -> None:
        """Start from the high watermark of the previous role (a new primary shows no more
        than it was shown)."""
        self._visibility.resume_at(end, self._max_record_size)
