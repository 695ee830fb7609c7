"""Transactions of a stopped broker: list the open ones straight from its log (no index, no
lock), or end one as an operator who knows what the producer decided."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from fmq.datadir import LOG_DIR, require_data_dir
from fmq.engine.broker import Broker
from fmq.log.reader import OnCorruption
from fmq.log.record import FORMAT_MAX_RECORD
from fmq.log.scanner import LogScanner
from fmq.tx.manager import TxManager
from fmq.tx.redo import redo_transaction_record
from fmq.tx.state import TxState


def open_transactions_in_log(data_dir: str,
                             progress: Callable[[int], None] | None = None) -> list[dict]:
    """Replay every transaction record of the log and list those never ended;
    ``progress(log_offset)`` is called after each record."""
    require_data_dir(data_dir)
    txm = TxManager(max_open=1 << 62, finished_memory=0, check_after_ms=0,
                    check_max_interval_ms=1)
    scanner = LogScanner(os.path.join(data_dir, LOG_DIR), on_corruption=OnCorruption.RAISE,
                         copy_body=False, max_record_size=FORMAT_MAX_RECORD)
    for rec in scanner:
        redo_transaction_record(rec, txm)
        if progress is not None:
            progress(rec.log_offset)
    return txm.list_open(time.time_ns() // 1_000_000)


def resolve_transaction(data_dir: str, tx_id: str, decision: str,
                        producer_group: str | None = None) -> TxState:
    """Open the stopped broker at ``data_dir`` (recovery runs, the lock is taken), commit
    (``decision`` "commit") or roll back ``producer_group``'s transaction ``tx_id`` (no
    group: the one group that used the id), close it again."""
    require_data_dir(data_dir)  # Broker.open would create a data dir anywhere
    with Broker.open(data_dir) as broker:
        end = broker.transactions.commit if decision == "commit" else broker.transactions.rollback
        return end(tx_id, producer_group)
