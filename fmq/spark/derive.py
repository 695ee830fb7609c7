"""The index items that need the whole log (the ``txends`` item of each transaction's
last end, the pending timers' items): the Spark plan over the scan's side rows
(:mod:`fmq.spark.scan`) and the executor-side functions that turn its Arrow batches into
the LMDB keys and values :class:`~fmq.index.store.IndexStore` writes (column-wise,
:mod:`fmq.spark.items`). The items of single records come from the scan itself.

Spark pickles the ``mapInArrow`` functions by reference: every executor imports this
module, so it must stay importable without the driver's state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fmq.index import keys as K
from fmq.spark.item_files import item_path, write_item_file
from fmq.spark.items import (
    END_TYPES,
    INDEXED_TYPES,
    TIMER_TYPE,
    batch_items,
    timer_batch_items,
    timer_count_items,
)

_COUNT_DDL = "items bigint"
_COUNT_ARROW = pa.schema([("items", pa.int64())])
#: The columns of a side row the end items read (tx_end needs no key or tags).
SIDE_ENTRY_COLUMNS = ["offset", "size", "type", "store_time", "topic", "queue_id",
                      "queue_offset", "tx_id", "producer_group", "ref_offset", "ref_size"]
__all__ = ["END_TYPES", "INDEXED_TYPES", "TIMER_TYPE", "last_end_items",
           "write_cross_segment_items", "write_items_task"]


def last_end_items(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The ``txends`` items of a batch of last COMMIT/ROLLBACK rows (one per id and
    producer group)."""
    out = batch_items(batch, latest_ends=True)
    return out.filter(pc.equal(out.column("db"), K.DB_TXENDS))


def write_items_task(out_dir: str, name: str,
                     derive: Callable[[pa.RecordBatch], pa.RecordBatch],
                     batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function (with the first three arguments bound): the items
    ``derive`` makes of the task's rows, written sorted to the item file ``NAME-PART`` in
    ``out_dir`` by the executor itself; yields one row, the item count."""
    part = TaskContext.get().partitionId()
    path = item_path(out_dir, name, part)
    written = write_item_file([derive(batch) for batch in batches], path)
    yield pa.RecordBatch.from_pydict({"items": [written]}, schema=_COUNT_ARROW)


def pending_timers(side: DataFrame) -> DataFrame:
    """The TIMER rows still pending: those no later MESSAGE (that delivered it) or TIMER
    (that relocated it) names in its ``ref_offset``, as recovery's redo leaves them.
    ``side`` holds the valid rows of the TIMER records and of every MESSAGE or TIMER with
    a ``ref_offset`` (:mod:`fmq.spark.scan` keeps those)."""
    timers = side.where(F.col("type") == TIMER_TYPE).select(
        "offset", "size", "queue_offset", "topic")
    fired = (side.where(F.col("type").isin("MESSAGE", TIMER_TYPE)
                        & F.col("ref_offset").isNotNull())
             .select(F.col("ref_offset").alias("offset")))
    return timers.join(fired, "offset", "left_anti")


def write_cross_segment_items(side: DataFrame, out_dir: str) -> int:
    """The index items that need the whole log, written as item files under
    ``out_dir``, each sorted by (database, key): the ``txends`` item of each transaction's
    last COMMIT/ROLLBACK, and the pending timers' items. ``side`` is the valid side rows of
    the scan (:mod:`fmq.spark.scan`); the other items come from the scan's own files.
    Returns how many items were written."""
    ends = side.where(F.col("type").isin(*END_TYPES)).select(*SIDE_ENTRY_COLUMNS)
    last_ends = (ends.groupBy("tx_id", "producer_group")
                 .agg(F.max_by(F.struct(*SIDE_ENTRY_COLUMNS), "offset").alias("e"))
                 .select("e.*"))
    pending = pending_timers(side)
    # The executors write the files: no Spark file commit, no global sort.
    counts = (
        last_ends.mapInArrow(partial(write_items_task, out_dir, "txends", last_end_items),
                             _COUNT_DDL)
        .union(pending.mapInArrow(
            partial(write_items_task, out_dir, "timers", timer_batch_items), _COUNT_DDL))
        .union(pending.groupBy("topic").count().mapInArrow(
            partial(write_items_task, out_dir, "timertopics", timer_count_items), _COUNT_DDL))
    ).collect()
    return sum(r["items"] for r in counts)
