"""The rebuild's one pass over the log, on the executors: each Spark task reads one
segment (or one range of a large one) with the data source's reader, writes the index
items its records make to a file of its own (:mod:`fmq.spark.item_files`), sorted by
(database, key), writes the rows of the records that take part in cross-segment facts
(transactions, consumer offsets, timers) to a side file of its own, and hands the driver
back one small summary.

Why not ``spark.read.format("fmq")``: every query over a Python data source plans it in a
fresh Python process on the driver, and the rebuild used to run half a dozen such queries.
Here the driver lists the segments once (:class:`~fmq.spark.source.FmqReader`, the same
reader and verdicts), and one Python RDD pass (``parallelize(range(tasks))``) runs the
tasks.

Why an RDD and not a DataFrame (``mapInArrow`` over ``spark.range``): the pass sends Spark
nothing but a summary per task, and a DataFrame query costs the JVM its planner, code
generation and Arrow set-up first: a fresh session's first trivial ``mapInArrow`` took
1.3 CPU seconds of JVM against 0.46 for the same RDD job (docs/spark.md, *The cold rebuild
within 2x*). Only a log that has side rows pays for a DataFrame, over the side files
(:func:`side_rows`), when the whole-log queries need it.

The item files need no global sort: the driver merges them (each is sorted) while it
loads LMDB (:mod:`fmq.spark.bulk_load`).

Spark pickles :func:`scan_tasks` and :func:`read_side_files` by reference and
:class:`ScanJob` by value: every executor imports this module.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from fmq.message import MESSAGE_ID_PROPERTY, PRODUCER_ID_PROPERTY
from fmq.spark.item_files import item_path, write_item_file
from fmq.spark.items import TIMER_TYPE, batch_items
from fmq.spark.rows import RECORD_COLUMNS
from fmq.spark.source import FmqReader, SegmentPartition

#: The record columns the side rows keep (what the transaction table, the consumer offsets
#: and the pending timers read).
SIDE_RECORD_COLUMNS = ["offset", "size", "type", "store_time", "topic", "queue_id",
                       "queue_offset", "tx_id", "producer_group", "ref_offset", "ref_size"]
#: Record types whose every row goes back to Spark.
SIDE_TYPES = ("PREPARE", "PRE_MESSAGE", "REF_MESSAGE", "TX_MESSAGE", "COMMIT", "ROLLBACK",
              "OFFSET", "EPOCH", TIMER_TYPE, "TOPIC")
#: The property a TOPIC record keeps its configuration in; side rows carry it as ``config``
#: (null for every other type: only TOPIC records need a property on the driver).
TOPIC_CONFIG_PROPERTY = "config"
_ARROW_TYPES = {name: arrow for name, _ddl, arrow in RECORD_COLUMNS}
SIDE_ARROW = pa.schema([(name, _ARROW_TYPES[name]) for name in SIDE_RECORD_COLUMNS]
                       + [(TOPIC_CONFIG_PROPERTY, pa.string())])
_DDL_TYPES = {name: ddl for name, ddl, _arrow in RECORD_COLUMNS}
#: The side rows' schema as Spark DDL (the DataFrame :func:`side_rows` makes).
SIDE_DDL = ", ".join([f"`{name}` {_DDL_TYPES[name]}" for name in SIDE_RECORD_COLUMNS]
                     + [f"`{TOPIC_CONFIG_PROPERTY}` string"])
#: Suffix of a side file (not the item files' ``.arrow``: the load merges every one of
#: those it finds).
SIDE_SUFFIX = ".side"


def items_file(items_dir: str, task: int) -> str:
    """The file of task ``task``'s index items."""
    return item_path(items_dir, "scan", task)


def side_file(side_dir: str, task: int) -> str:
    """The file of task ``task``'s side rows."""
    return os.path.join(side_dir, f"side-{task:06d}{SIDE_SUFFIX}")


class ScanJob:
    """What every task needs: the reader (segment list and options, built once on the
    driver), the partitions, where the item files and the side files go, and the start of
    the dedup window (the first idempotent send stored at or after ``dedup_since`` is
    reported)."""

    def __init__(self, reader: FmqReader, items_dir: str, dedup_since: int,
                 side_dir: str) -> None:
        self.reader = reader
        self.partitions: list[SegmentPartition] = reader.partitions()
        self.items_dir = items_dir
        self.dedup_since = dedup_since
        self.side_dir = side_dir

    def scan(self, task: int) -> dict:
        """Partition ``task``'s summary (:func:`_summary`); writes its item file and, when
        it has side rows, its side file."""
        items: list[pa.RecordBatch] = []
        sides: list[pa.RecordBatch] = []
        damage: list[dict] = []
        records = 0
        side_types: dict[str, int] = {}
        last: pa.RecordBatch | None = None
        dedup_from: int | None = None
        for batch in self.reader.read(self.partitions[task]):
            damaged = batch.column("damage").is_valid()
            if pc.any(damaged).as_py():
                damage += batch.filter(damaged).select(
                    ["offset", "segment", "damage"]).to_pylist()
                batch = batch.filter(pc.invert(damaged))
            if not batch.num_rows:
                continue
            records += batch.num_rows
            last = batch.slice(batch.num_rows - 1)
            items.append(batch_items(batch, latest_ends=False))
            rtype = batch.column("type")
            fired = pc.and_(pc.is_in(rtype, pa.array(["MESSAGE", TIMER_TYPE])),
                            batch.column("ref_offset").is_valid())
            side = batch.filter(pc.or_(pc.is_in(rtype, pa.array(SIDE_TYPES)), fired))
            if side.num_rows:
                for kind in pc.value_counts(side.column("type")).to_pylist():
                    side_types[kind["values"]] = side_types.get(kind["values"], 0) + kind["counts"]
                sides.append(_side(side))
            if dedup_from is None:
                dedup_from = self._first_idempotent(batch)
        write_item_file(items, items_file(self.items_dir, task))
        if sides:
            _write_side_file(sides, side_file(self.side_dir, task))
        return _summary(last, records, dedup_from, side_types, damage)

    def _first_idempotent(self, batch: pa.RecordBatch) -> int | None:
        """Log offset of the batch's first MESSAGE with a producer or message id stored at
        or after ``dedup_since`` (the rows are in log order)."""
        props = batch.column("properties")
        ends = props.offsets
        if ends[-1].as_py() == ends[0].as_py():  # no row has properties (most logs)
            return None
        has_id = pc.or_(pc.map_lookup(props, PRODUCER_ID_PROPERTY, "first").is_valid(),
                        pc.map_lookup(props, MESSAGE_ID_PROPERTY, "first").is_valid())
        hit = pc.and_(pc.and_(pc.equal(batch.column("type"), "MESSAGE"), has_id),
                      pc.greater_equal(batch.column("store_time"), self.dedup_since))
        offsets = batch.column("offset").filter(hit)
        return offsets[0].as_py() if len(offsets) else None


def _side(rows: pa.RecordBatch) -> pa.RecordBatch:
    arrays = [rows.column(name) for name in SIDE_RECORD_COLUMNS]
    config = pc.map_lookup(rows.column("properties"), TOPIC_CONFIG_PROPERTY, "first")
    arrays.append(pc.if_else(pc.equal(rows.column("type"), "TOPIC"), config,
                             pa.nulls(rows.num_rows, pa.string())))
    return pa.RecordBatch.from_arrays(arrays, schema=SIDE_ARROW)


def _write_side_file(batches: list[pa.RecordBatch], path: str) -> None:
    """Written aside and renamed, as the item files: a retried or speculative task never
    leaves half a file."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, SIDE_ARROW) as writer:
        for batch in batches:
            writer.write_batch(batch)
    os.replace(tmp, path)


def _summary(last: pa.RecordBatch | None, records: int, dedup_from: int | None,
             side_types: dict[str, int], damage: list[dict]) -> dict:
    """What the driver needs of one task: its last valid record (``offset``, ``size``,
    ``type``, ``segment``; None without one), its record count, its first idempotent send
    in the dedup window, how many side rows of each record type it wrote (the driver skips
    the queries that would find none) and its damage rows (``offset``, ``segment``,
    ``damage``: a torn tail)."""
    end = None if last is None else last.select(["offset", "size", "type", "segment"]).to_pylist()[0]
    return {"last": end, "records": records, "dedup_from": dedup_from,
            "side_types": side_types, "damage": damage}


def scan_tasks(job: ScanJob, tasks: Iterable[int]) -> Iterator[dict]:
    """``mapPartitions`` function over ``parallelize(range(len(job.partitions)))``: scans
    the partitions whose numbers it is given (one per Spark task), one summary each."""
    for task in tasks:
        yield job.scan(task)


def read_side_files(side_dir: str, tasks: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function over ``spark.range``: the side rows of the tasks whose
    numbers it is given (a task without side rows wrote no file)."""
    for ids in tasks:
        for task in ids.column(0).to_pylist():
            path = side_file(side_dir, task)
            if os.path.exists(path):
                reader = pa.ipc.open_file(pa.memory_map(path))
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)


def side_rows(spark: SparkSession, side_dir: str, tasks: int) -> DataFrame:
    """The side rows every task of a scan wrote, as a DataFrame (``SIDE_DDL``), read by
    one Spark task per core."""
    parts = max(1, min(tasks, spark.sparkContext.defaultParallelism))
    return spark.range(0, tasks, 1, parts).mapInArrow(partial(read_side_files, side_dir),
                                                      SIDE_DDL)
