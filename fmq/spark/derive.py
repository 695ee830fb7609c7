"""The index items derived from the log's rows: the executor-side functions that turn
record rows into the LMDB keys and values :class:`~fmq.index.store.IndexStore` writes,
and the Spark plan that runs them and writes the items sorted to a Parquet table.

Spark pickles :func:`index_items` and :func:`last_end_items` by reference: every executor
imports this module, so it must stay importable without the driver's state.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fmq.index import keys as K
from fmq.index.entries import queue_entry, tx_end
from fmq.log.record import NONE, Record, RecordType
from fmq.spark.session import file_uri

ITEMS_SCHEMA = "db int, key binary, value binary"
_ITEMS_ARROW = pa.schema([("db", pa.int32()), ("key", pa.binary()), ("value", pa.binary())])
#: The columns the derivation reads (what queue_entry and the tx table need).
ENTRY_COLUMNS = ["offset", "size", "type", "store_time", "topic", "queue_id", "queue_offset",
                 "tx_id", "producer_group", "ref_offset", "ref_size", "key", "tags"]
#: Record types that become queue entries, and those that end a transaction.
INDEXED_TYPES = ("MESSAGE", "REF_MESSAGE", "TX_MESSAGE")
END_TYPES = ("COMMIT", "ROLLBACK")


def record_from_row(row: Mapping) -> Record:
    """The inverse of :meth:`Record.to_dict` for the header fields (the data source's row
    format): the thin adapter that lets :func:`queue_entry` run on a DataFrame row."""
    def opt(name: str, default: int) -> int:
        v = row.get(name)
        return default if v is None else v

    return Record(
        RecordType[row["type"]],
        log_offset=row["offset"],
        size=row["size"],
        store_time=row["store_time"],
        queue_id=opt("queue_id", NONE),
        queue_offset=opt("queue_offset", NONE),
        ref_offset=opt("ref_offset", NONE),
        ref_size=opt("ref_size", 0),
        topic=row.get("topic") or "",
        tx_id=row.get("tx_id") or "",
        producer_group=row.get("producer_group") or "",
        key=row.get("key"),
        tags=row.get("tags"),
    )


def _items_of(batches: Iterable[pa.RecordBatch], last: bool) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        dbs: list[int] = []
        keys: list[bytes] = []
        values: list[bytes] = []
        for row in batch.to_pylist():
            rec = record_from_row(row)
            entry = queue_entry(rec)
            if entry is not None:
                produced = K.entry_items(entry)
            else:
                end = tx_end(rec)
                if end is None:
                    continue
                produced = K.end_items(end, last)
            for db, k, v in produced:
                dbs.append(db)
                keys.append(k)
                values.append(v)
        yield pa.RecordBatch.from_arrays(
            [pa.array(dbs, pa.int32()), pa.array(keys, pa.binary()), pa.array(values, pa.binary())],
            schema=_ITEMS_ARROW)


def index_items(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow function (runs on the executors): record rows → index items, except the
    ``txends`` value (see :func:`last_end_items`)."""
    return _items_of(batches, last=False)


def last_end_items(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow function over the last COMMIT/ROLLBACK row of each transaction id."""
    for out in _items_of(batches, last=True):
        yield out.filter(pc.equal(out.column("db"), K.DB_TXENDS))


def write_sorted_items(valid: DataFrame, partitions: int, out_dir: str) -> None:
    """Derive the index items of the ``valid`` rows and write them to a Parquet table at
    ``out_dir``, sorted by (database, key) across its part files."""
    indexed = valid.where(F.col("type").isin(*INDEXED_TYPES)).select(*ENTRY_COLUMNS)
    ends = valid.where(F.col("type").isin(*END_TYPES)).select(*ENTRY_COLUMNS)
    last_ends = (ends.groupBy("tx_id")
                 .agg(F.max_by(F.struct(*ENTRY_COLUMNS), "offset").alias("e"))
                 .select("e.*"))
    # The grouping leaves spark.sql.shuffle.partitions partitions; a Python task each is
    # wasteful for what is one small row per transaction.
    last_ends = last_ends.coalesce(max(1, partitions))
    items = (indexed.unionByName(ends).mapInArrow(index_items, ITEMS_SCHEMA)
             .unionByName(last_ends.mapInArrow(last_end_items, ITEMS_SCHEMA)))
    # A global sort runs its input twice (a sampling pass for the range bounds, then the
    # shuffle): keep the items so the Python derivation runs once.
    items = items.persist(StorageLevel.MEMORY_AND_DISK)
    shutil.rmtree(out_dir, ignore_errors=True)
    try:
        items.orderBy("db", "key").write.parquet(file_uri(out_dir))
    finally:
        items.unpersist()
