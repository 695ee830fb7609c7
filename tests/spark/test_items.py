"""The column-wise index items equal the per-record definition (fmq.index.keys) on a log
with every record type."""

from __future__ import annotations

from fmq.index import keys as K
from fmq.index.entries import queue_entry, tx_end
from fmq.log.scanner import LogScanner
from fmq.spark.items import batch_items
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
        assert {db for db, _k, _v in got} == (set(range(len(K.ITEM_DBS))) if latest
                                              else set(range(len(K.ITEM_DBS))) - {K.DB_TXENDS})
