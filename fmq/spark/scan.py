"""The rebuild's one pass over the log, on the executors: each Spark task reads one
segment (or one range of a large one) with the data source's reader, writes the index
items its records make to a file of its own (:mod:`fmq.spark.item_files`), sorted by
(database, key), and hands Spark back only what needs the whole log: the rows of the
records that take part in cross-segment facts (transactions, consumer offsets, timers)
and one summary row.

Why not ``spark.read.format("fmq")``: every query over a Python data source plans it in a
fresh Python process on the driver, and the rebuild used to run half a dozen such queries.
Here the driver lists the segments once (:class:`~fmq.spark.source.FmqReader`, the same
reader and verdicts), and one ``mapInArrow`` over ``spark.range`` runs the tasks.

The item files need no global sort: the driver merges them (each is sorted) while it
loads LMDB (:mod:`fmq.spark.bulk_load`).

Spark pickles :func:`scan_partitions` by reference and :class:`ScanJob` by value: every
executor imports this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from fmq.message import MESSAGE_ID_PROPERTY, PRODUCER_ID_PROPERTY
from fmq.spark.item_files import item_path, write_item_file
from fmq.spark.items import TIMER_TYPE, batch_items
from fmq.spark.rows import DAMAGE_ARROW, RECORD_COLUMNS
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
#: ``kind`` of a side row: a record, a damage row, or the summary of one task.
RECORD, DAMAGE, SUMMARY = "record", "damage", "summary"

_ARROW_TYPES = {name: arrow for name, _ddl, arrow in RECORD_COLUMNS}
SIDE_ARROW = pa.schema(
    [(name, _ARROW_TYPES[name]) for name in SIDE_RECORD_COLUMNS]
    + [("config", pa.string()),
       ("segment", pa.string()), ("damage", DAMAGE_ARROW), ("kind", pa.string()),
       ("records", pa.int64()), ("dedup_from", pa.int64()),
       ("side_types", pa.map_(pa.string(), pa.int64()))])
_DDL_TYPES = {name: ddl for name, ddl, _arrow in RECORD_COLUMNS}
#: The side rows' schema as Spark DDL (the ``mapInArrow`` output).
SIDE_DDL = ", ".join(
    [f"`{name}` {_DDL_TYPES[name]}" for name in SIDE_RECORD_COLUMNS]
    + ["`config` string", "`segment` string", "`damage` struct<kind:string,reason:string>", "`kind` string",
       "`records` bigint", "`dedup_from` bigint", "`side_types` map<string,bigint>"])


def items_file(items_dir: str, task: int) -> str:
    """The file of task ``task``'s index items."""
    return item_path(items_dir, "scan", task)


class ScanJob:
    """What every task needs: the reader (segment list and options, built once on the
    driver), the partitions, where the item files go, and the start of the dedup window
    (the first idempotent send stored at or after ``dedup_since`` is reported)."""

    def __init__(self, reader: FmqReader, items_dir: str, dedup_since: int) -> None:
        self.reader = reader
        self.partitions: list[SegmentPartition] = reader.partitions()
        self.items_dir = items_dir
        self.dedup_since = dedup_since

    def scan(self, task: int) -> Iterator[pa.RecordBatch]:
        """Side rows of partition ``task``, then its summary row; writes its item file."""
        items: list[pa.RecordBatch] = []
        records = 0
        side_types: dict[str, int] = {}
        last: pa.RecordBatch | None = None
        dedup_from: int | None = None
        for batch in self.reader.read(self.partitions[task]):
            damaged = batch.column("damage").is_valid()
            if pc.any(damaged).as_py():
                yield _side(batch.filter(damaged), DAMAGE)
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
                yield _side(side, RECORD)
            if dedup_from is None:
                dedup_from = self._first_idempotent(batch)
        write_item_file(items, items_file(self.items_dir, task))
        yield _summary(last, records, dedup_from, side_types)

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


def _side(rows: pa.RecordBatch, kind: str) -> pa.RecordBatch:
    n = rows.num_rows
    arrays = [rows.column(name) for name in SIDE_RECORD_COLUMNS]
    config = pc.map_lookup(rows.column("properties"), TOPIC_CONFIG_PROPERTY, "first")
    arrays.append(pc.if_else(pc.equal(rows.column("type"), "TOPIC"), config,
                             pa.nulls(n, pa.string())))
    arrays += [rows.column("segment"), rows.column("damage"),
               pa.repeat(pa.scalar(kind, pa.string()), n), pa.nulls(n, pa.int64()),
               pa.nulls(n, pa.int64()), pa.nulls(n, SIDE_ARROW.field("side_types").type)]
    return pa.RecordBatch.from_arrays(arrays, schema=SIDE_ARROW)


def _summary(last: pa.RecordBatch | None, records: int, dedup_from: int | None,
             side_types: dict[str, int]) -> pa.RecordBatch:
    """One row: the task's last valid record (offset, size, type, segment), its record
    count, its first idempotent send in the dedup window and how many side rows of each
    record type it returned (the driver skips the queries that would find none)."""
    row = {name: None for name in SIDE_ARROW.names}
    if last is not None:
        for name in ("offset", "size", "type", "segment"):
            row[name] = last.column(name)[0].as_py()
    row.update(kind=SUMMARY, records=records, dedup_from=dedup_from,
               side_types=list(side_types.items()))
    return pa.RecordBatch.from_pylist([row], schema=SIDE_ARROW)


def scan_partitions(job: ScanJob, tasks: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function over ``spark.range(len(job.partitions))``: scans the
    partitions whose numbers it is given (one per Spark task)."""
    for ids in tasks:
        for task in ids.column(0).to_pylist():
            yield from job.scan(task)
