"""The column-wise index items equal the per-record definition (fmq.index.keys) on a log
with every record type."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from fmq.index import keys as K
from fmq.index.entries import TimerEntry, queue_entry, timer_changes, tx_end
from fmq.log.scanner import LogScanner
from fmq.spark.items import batch_items, timer_batch_items
from fmq.spark.source import FmqReader

from .damage import log_dir


def _batches(path: str):
    reader = FmqReader(log_dir(path), {"torntail": "allow"})
    for partition in reader.partitions():
        yield from reader.read(partition)


def test_batch_items_equal_entry_and_end_items_of_every_record(built_log):
    for latest in (False, True):
        expected = []
        for rec in LogScanner(log_dir(built_log.path), copy_body=False):
            entry = queue_entry(rec)
            if entry is not None:
                expected += K.entry_items(entry)
            elif (end := tx_end(rec)) is not None:
                expected += K.end_items(end, latest)
        got = []
        for batch in _batches(built_log.path):
            items = batch_items(batch.filter(batch.column("damage").is_null()), latest)
            got += zip(items.column("db").to_pylist(), items.column("key").to_pylist(),
                       items.column("value").to_pylist(), strict=True)
        assert sorted(got) == sorted(expected)
        timer_dbs = {K.DB_TIMERS, K.DB_TIMEROFF, K.DB_TIMERTOPICS}  # from the pending TIMERs
        every = set(range(len(K.ITEM_DBS))) - timer_dbs
        assert {db for db, _k, _v in got} == (every if latest else every - {K.DB_TXENDS})


def test_timer_items_of_the_pending_timer_rows_equal_the_per_record_items(built_log):
    pending: dict[int, object] = {}
    for rec in LogScanner(log_dir(built_log.path), copy_body=False):
        for item in timer_changes(rec):
            if isinstance(item, TimerEntry):
                pending[item.offset] = item
            else:
                pending.pop(item.timer_offset)
    assert len(pending) == 6  # and six were delivered (tests/spark/conftest.py)
    expected = [i for t in pending.values() for i in K.timer_items(t)]
    got = []
    for batch in _batches(built_log.path):
        rows = batch.filter(pc.and_(batch.column("damage").is_null(),
                                    pc.equal(batch.column("type"), "TIMER")))
        rows = rows.filter(pc.is_in(rows.column("offset"), pa.array(list(pending))))
        items = timer_batch_items(rows)
        got += zip(items.column("db").to_pylist(), items.column("key").to_pylist(),
                   items.column("value").to_pylist(), strict=True)
    assert sorted(got) == sorted(expected)
