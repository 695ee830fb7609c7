"""Open transactions of a stopped broker, read straight from its log (no index, no lock)."""

from __future__ import annotations

import os
import time

from fmq.datadir import LOG_DIR
from fmq.log.record import FORMAT_MAX_RECORD
from fmq.log.scanner import LogScanner
from fmq.recovery.recover import redo_record
from fmq.tx.manager import TxManager


def open_transactions_in_log(data_dir: str) -> list[dict]:
    """Replay every transaction record of the log and list those never ended."""
    txm = TxManager(max_open=1 << 62, finished_memory=0, check_after_ms=0,
                    check_max_interval_ms=1)
    sink: list = []
    scanner = LogScanner(os.path.join(data_dir, LOG_DIR), on_corruption="raise",
                         copy_body=False, max_record_size=FORMAT_MAX_RECORD)
    for rec in scanner:
        redo_record(rec, txm, sink)
        sink.clear()
    return txm.list_open(time.time_ns() // 1_000_000)
