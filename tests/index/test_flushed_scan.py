"""Indexing the flushed log by reading it (``index_flushed``, the indexer process's path and
the dispatcher's catch-up): runs of records read at once give the very items a scan record
by record gives, and never an item of a record past the flushed end it was given, though a
run read from the files reaches past it."""

from __future__ import annotations

import os

import fmq
from fmq import Message
from fmq.datadir import LOG_DIR
from fmq.index.entries import index_items, sort_items
from fmq.index.flushed_scan import index_flushed
from fmq.index.indexer_process import SegmentFiles
from fmq.log.reader import OnCorruption
from fmq.log.record import RecordType
from fmq.log.scanner import LogScanner

MAX_RECORD = 1 << 20


def write_log(path: str) -> str:
    """A log of several segments (their fillers) with runs of plain messages between
    records of other kinds: keyed and tagged messages, a transaction, a consumer offset."""
    cfg = fmq.BrokerConfig(segment_size=64 * 1024, max_message_size=4096, queues_per_topic=3)
    with fmq.Broker.open(path, cfg) as b:
        b.send_batch([Message("t", b"x" * 700) for _ in range(150)])
        b.send(Message("t", b"keyed", key="k1", tags="a"))
        b.transactions.prepare([Message("t", b"in a transaction")], "g", tx_id="tx-1")
        b.transactions.commit("tx-1", "g")
        b.offsets.commit("group", [("t", 0, 3)])
        b.send_batch([Message("u", b"y" * 300, key=f"k{i}") for i in range(120)])
        b.send_batch([Message("t", b"z" * 900) for _ in range(80)])
    return os.path.join(path, LOG_DIR)


def record_by_record(log_dir: str, target: int) -> tuple[list, list, list]:
    """The items of every record ending at or before ``target``, one record at a time."""
    entries, marks, timers = [], [], []
    for rec in LogScanner(log_dir, on_corruption=OnCorruption.RAISE, copy_body=False):
        if rec.end_offset > target:
            break
        if rec.type != RecordType.FILLER:
            sort_items(index_items(rec), entries, marks, timers)
    return entries, marks, timers


def test_runs_give_the_items_of_a_scan_record_by_record_up_to_the_flushed_end(tmp_path):
    log_dir = write_log(str(tmp_path / "data"))
    ends = [rec.end_offset for rec in LogScanner(log_dir, copy_body=False)]
    records = list(LogScanner(log_dir, copy_body=False))
    # Ends inside runs of plain messages, before and after the other records, and the last.
    targets = sorted({ends[0], ends[5], ends[149], ends[151], ends[153], ends[200],
                      ends[len(ends) // 2], ends[-2], ends[-1]})
    for target in targets:
        segments = SegmentFiles(log_dir)
        got: tuple[list, list, list] = ([], [], [])
        applied_offsets: list[int] = []

        def apply(entries, applied, marks, timers, got=got, applied_offsets=applied_offsets):
            got[0].extend(entries)
            got[1].extend(marks)
            got[2].extend(timers)
            applied_offsets.append(applied)

        segments.bases()
        applied = index_flushed(source=segments, start=records[0].log_offset, target=target,
                                max_record_size=MAX_RECORD, batch=64,
                                segment_end=segments.segment_end, apply=apply)
        assert applied == target
        assert applied_offsets[-1] == target and applied_offsets == sorted(applied_offsets)
        assert got == record_by_record(log_dir, target), target
