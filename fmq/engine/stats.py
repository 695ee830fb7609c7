"""The broker's counters and offsets in one dict (``fmq stats``, the server's STATS)."""

from __future__ import annotations

from fmq.engine.checkpoints import Checkpointer
from fmq.engine.reads import Reader
from fmq.engine.retention import Retention
from fmq.index.dispatcher import Dispatcher
from fmq.log.log import Log
from fmq.tx.log_access import now_ms
from fmq.tx.manager import TxManager
from fmq.tx.writer import TxWriter


def broker_stats(log_: Log, dispatcher: Dispatcher, txm: TxManager, writer: TxWriter,
                 retention: Retention, checkpointer: Checkpointer, reader: Reader) -> dict:
    """Log, index, transaction and checkpoint figures of a running broker."""
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
        "segments": len(log_.segments),
        "flushes": log_.flush_count,
        "open_transactions": len(open_txs),
        "oldest_transaction_age_ms": max((t["age_ms"] for t in open_txs), default=0),
        "feedback_checks_sent": txm.checks_sent,
        "tx_relocations": writer.relocations,
        "tx_timeouts": retention.timeouts,
        "log_failed": str(log_.failed) if log_.failed else None,
        "dispatcher_error": str(dispatcher.error) if dispatcher.error else None,
        "index_error": str(dispatcher.failing) if dispatcher.failing else None,
        "index_retries": dispatcher.retries,
        "last_checkpoint": last.to_dict() if last else None,
        "bad_records_read": reader.bad_records.records,
        "bad_record_reads": reader.bad_records.reads,
    }
