"""The broker's counters and offsets in one dict (``fmq stats``, the server's STATS, the
metrics)."""

from __future__ import annotations

import struct

from fmq.dedup import DedupWindow
from fmq.engine.checkpoints import Checkpointer
from fmq.engine.reads import Reader
from fmq.engine.retention import Retention
from fmq.errors import FMQError
from fmq.index.dispatcher import Dispatcher
from fmq.log.log import Log
from fmq.log.placement import now_ms
from fmq.log.record import HEADER, HEADER_SIZE, RecordType
from fmq.tx.closed_scopes import ClosedScopeRollback
from fmq.tx.manager import TxManager
from fmq.tx.relocation import TxRelocator


def broker_stats(log_: Log, dispatcher: Dispatcher, txm: TxManager, relocator: TxRelocator,
                 retention: Retention, checkpointer: Checkpointer, reader: Reader,
                 dedup: DedupWindow, closed_scopes: ClosedScopeRollback) -> dict:
    """Log, index, transaction, checkpoint and dedup figures of a running broker."""
    flushed = log_.flushed_offset
    applied = dispatcher.applied_offset
    open_txs = txm.list_open(now_ms())
    last = checkpointer.last
    return {
        "log_start": log_.first_offset,
        "log_end": log_.next_offset,
        "flushed_offset": flushed,
        "applied_offset": applied,
        "index_lag": max(0, flushed - applied),
        "index_lag_ms": index_lag_ms(log_, applied, flushed),
        "segments": len(log_.segments),
        # each segment file's base offset (its name), oldest first: where a log offset is
        "segment_bases": [seg.base for seg in log_.segments],
        "flushes": log_.flush_count,
        "open_transactions": len(open_txs),
        "oldest_transaction_age_ms": max((t["age_ms"] for t in open_txs), default=0),
        "feedback_checks_sent": txm.checks_sent,
        "tx_relocations": relocator.relocations,
        "offset_copies": retention.offsets.copies,
        "tx_timeouts": retention.timeouts,
        "tx_closed_scope_rollbacks": closed_scopes.rollbacks,
        "tx_decided_scope_commits": closed_scopes.roll_forwards,
        "tx_scope_decisions_adopted": closed_scopes.decisions_adopted,
        "retention_passes": retention.passes,
        # the pending timers' bytes while they alone keep the log over retention_bytes
        "timers_pinning_retention_bytes": retention.timer_pinning.pinning_bytes,
        "log_failed": str(log_.failed) if log_.failed else None,
        "dispatcher_error": str(dispatcher.error) if dispatcher.error else None,
        "index_error": str(dispatcher.failing) if dispatcher.failing else None,
        "index_retries": dispatcher.retries,
        "last_checkpoint": last.to_dict() if last else None,
        "bad_records_read": reader.bad_records.records,
        "bad_record_reads": reader.bad_records.reads,
        # idempotent sends: producer ids and message ids remembered, resends answered
        # with their original's result since the broker opened
        **dedup.counts(),
    }


def index_lag_ms(log_: Log, applied: int, flushed: int) -> int:
    """How long the oldest durable record the index has not applied has waited: now minus
    its store time (0 when the index is caught up or the record cannot be read)."""
    if applied >= flushed:
        return 0
    try:
        header = HEADER.unpack(log_.read(applied, HEADER_SIZE))
    except (FMQError, struct.error):  # retention deleted it meanwhile: no figure this time
        return 0
    if header[4] == RecordType.FILLER or header[6] <= 0:  # a filler has no store time
        return 0
    return max(0, now_ms() - header[6])
