"""The index items derived from the log's rows: the executor-side functions that turn
Arrow batches of record rows into the LMDB keys and values
:class:`~fmq.index.store.IndexStore` writes (column-wise, :mod:`fmq.spark.items`), and the
Spark plan that runs them and writes the items sorted to a Parquet table.

Spark pickles :func:`index_items` and :func:`last_end_items` by reference: every executor
imports this module, so it must stay importable without the driver's state.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fmq.index import keys as K
from fmq.spark.items import (
    END_TYPES,
    INDEXED_TYPES,
    TIMER_TYPE,
    batch_items,
    timer_batch_items,
    timer_count_items,
)
from fmq.spark.session import file_uri

ITEMS_SCHEMA = "db int, key binary, value binary"
#: The columns the derivation reads (what queue_entry and the tx table need).
ENTRY_COLUMNS = ["offset", "size", "type", "store_time", "topic", "queue_id", "queue_offset",
                 "tx_id", "producer_group", "ref_offset", "ref_size", "key", "tags"]
__all__ = ["END_TYPES", "INDEXED_TYPES", "index_items", "last_end_items", "pending_timer_items",
           "write_sorted_items"]


def index_items(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow function (runs on the executors): record rows → index items, except the
    ``txends`` value (see :func:`last_end_items`)."""
    for batch in batches:
        yield batch_items(batch, latest_ends=False)


def last_end_items(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow function over the last COMMIT/ROLLBACK row of each transaction id."""
    for batch in batches:
        out = batch_items(batch, latest_ends=True)
        yield out.filter(pc.equal(out.column("db"), K.DB_TXENDS))


def pending_timer_items(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow function over the TIMER rows no MESSAGE delivered."""
    for batch in batches:
        yield timer_batch_items(batch)


def timer_topic_items(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow function over (topic, count) rows of pending timers."""
    for batch in batches:
        yield timer_count_items(batch)


def pending_timers(load: Callable[[], DataFrame]) -> DataFrame:
    """The TIMER rows still pending: those no later MESSAGE (that delivered it) or TIMER
    (that relocated it) names in its ``ref_offset``, as recovery's redo leaves them."""
    valid = F.col("damage").isNull()
    timers = load().where((F.col("type") == TIMER_TYPE) & valid).select(
        "offset", "size", "queue_offset", "topic")
    fired = (load().where(F.col("type").isin("MESSAGE", TIMER_TYPE) & valid
                          & F.col("ref_offset").isNotNull())
             .select(F.col("ref_offset").alias("offset")))
    return timers.join(fired, "offset", "left_anti")


def write_sorted_items(load: Callable[[], DataFrame], partitions: int, out_dir: str) -> None:
    """Derive the index items of the log's records and write them to a Parquet table at
    ``out_dir``, sorted by (database, key) across its part files. ``load()`` gives the
    source's DataFrame with filter pushdown on: one load per differently filtered scan,
    so the source reads only the record types each needs."""
    valid = F.col("damage").isNull()
    indexed = load().where(F.col("type").isin(*INDEXED_TYPES) & valid).select(*ENTRY_COLUMNS)
    ends = load().where(F.col("type").isin(*END_TYPES) & valid).select(*ENTRY_COLUMNS)
    last_ends = (ends.groupBy("tx_id")
                 .agg(F.max_by(F.struct(*ENTRY_COLUMNS), "offset").alias("e"))
                 .select("e.*"))
    # The grouping leaves spark.sql.shuffle.partitions partitions; a Python task each is
    # wasteful for what is one small row per transaction.
    last_ends = last_ends.coalesce(max(1, partitions))
    pending = pending_timers(load)
    items = (indexed.unionByName(ends).mapInArrow(index_items, ITEMS_SCHEMA)
             .unionByName(last_ends.mapInArrow(last_end_items, ITEMS_SCHEMA))
             .unionByName(pending.mapInArrow(pending_timer_items, ITEMS_SCHEMA))
             .unionByName(pending.groupBy("topic").count().coalesce(max(1, partitions))
                          .mapInArrow(timer_topic_items, ITEMS_SCHEMA)))
    # A global sort runs its input twice (a sampling pass for the range bounds, then the
    # shuffle): keep the items so the Python derivation runs once.
    items = items.persist(StorageLevel.MEMORY_AND_DISK)
    shutil.rmtree(out_dir, ignore_errors=True)
    try:
        items.orderBy("db", "key").write.parquet(file_uri(out_dir))
    finally:
        items.unpersist()
