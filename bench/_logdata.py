"""The logs the rebuild benchmarks read (``bench_rebuild.py``, ``bench_spark_scan.py``):
written once here so both measure the same input.

:func:`build_log` appends MESSAGE records with :class:`fmq.log.log.Log` directly (no fsync
per message: the log is only input); :func:`build_mixed_log` has the real broker write
plain messages, transactions and consumer offsets; :func:`log_end` is the valid end of a
log written before (``--data``/``--keep`` runs).
"""

from __future__ import annotations

import os
import time

from fmq.config import BrokerConfig
from fmq.datadir import LOG_DIR
from fmq.log.log import Log
from fmq.log.record import Record, RecordType

MB = 1_000_000


def build_log(data_dir: str, size_mb: int, body_size: int, segment_size: int) -> int:
    """Append MESSAGE records until the log holds ``size_mb`` MB; returns the log end."""
    log = Log(os.path.join(data_dir, LOG_DIR), segment_size)
    body = (b"0123456789abcdef" * (body_size // 16 + 1))[:body_size]
    queues = 8
    next_qoff = [0] * queues
    now = int(time.time() * 1000)
    i = 0
    target = size_mb * MB
    while log.next_offset < target:
        with log.lock:
            for _ in range(1000):
                q = i % queues
                rec = Record(RecordType.MESSAGE, store_time=now + i // 1000, queue_id=q,
                             queue_offset=next_qoff[q], topic=f"bench-{q % 2}",
                             key=f"k{i}" if i % 10 == 0 else None,
                             tags="t" if i % 3 == 0 else None, body=body)
                log.append_locked(rec)
                next_qoff[q] += 1
                i += 1
            end = log.next_offset
        log.wait_durable(end, sync=False)
    log.flush()
    end = log.next_offset
    log.close()
    return end


def build_mixed_log(data_dir: str, size_mb: int, body_size: int, segment_size: int) -> int:
    """A log written by the real broker: batches of plain messages, a committed and a
    rolled-back transaction and a consumer offset after each, one transaction left open
    (so every pass of the rebuild has work). Returns the log end."""
    import fmq

    body = (b"0123456789abcdef" * (body_size // 16 + 1))[:body_size]
    cfg = BrokerConfig(segment_size=segment_size, max_message_size=segment_size // 4)
    with fmq.Broker.open(data_dir, cfg) as b:
        i = 0
        while b.stats()["log_end"] < size_mb * MB:
            b.send_batch([fmq.Message(f"bench-{j % 2}", body, key=f"k{i + j}")
                          for j in range(50)])
            tx = b.transactions.prepare([fmq.Message("bench-tx", body),
                                         fmq.Message("bench-0", body)],
                           producer_group="bench")
            b.transactions.commit(tx)
            b.transactions.rollback(b.transactions.prepare([fmq.Message("bench-tx", body)],
                                                           producer_group="bench"))
            b.wait_indexed()
            b.offsets.commit("readers", [("bench-0", 0,
                                          b._index.all_queues().get(("bench-0", 0), (0, 0))[1])])
            i += 50
        b.transactions.prepare([fmq.Message("bench-tx", body)], producer_group="bench",
                               tx_id="left-open")
        b.wait_indexed()
        return b.stats()["log_end"]


def log_end(data_dir: str) -> int:
    """The valid end of the log in ``data_dir`` (every record checked once)."""
    from fmq.log.scanner import LogScanner

    scanner = LogScanner(os.path.join(data_dir, LOG_DIR), copy_body=False)
    for _ in scanner:
        pass
    return scanner.end_offset
