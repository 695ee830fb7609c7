"""The index rebuild as a Spark job: read the raw segments in parallel, derive the index
with the online dispatcher's own function, write a fresh LMDB index and a checkpoint.

Run it as ``fmq index rebuild DATA_DIR --spark [--master URL] [--out DIR] [--parquet DIR]``
or ``spark-submit -m``-style: ``spark-submit --master URL $(python -c 'import
fmq.spark.rebuild as m; print(m.__file__)') DATA_DIR [--out DIR] [--parquet DIR]``
(``python -m fmq.spark.rebuild DATA_DIR`` runs it with ``local[*]``).

Passes:

1. **Lock** the data directory (the broker's ``LOCK`` file, ``flock``): refuse while a
   broker runs on it.
2. **Read** ``spark.read.format("fmq")`` with ``mode=failfast`` and ``tornTail=allow``:
   corruption fails the job naming segment and offset (as recovery would); a torn tail is
   reported (the broker cuts it on its next open; this job never writes to the log).
3. **Derive** on the executors: each MESSAGE / REF_MESSAGE / TX_MESSAGE row becomes a
   :class:`~fmq.log.record.Record` again and goes through
   :func:`fmq.index.entries.queue_entry`, the function the dispatcher and recovery use;
   the entry becomes the same LMDB keys and values :class:`~fmq.index.store.IndexStore`
   writes. Spark sorts them by (database, key) and writes them to a temporary Parquet
   table next to the output, and finds the open transactions.
4. **Write** a fresh LMDB environment in key order with ``putmulti(append=True)``,
   checking the counts it returns (append mode silently skips an out-of-order or
   duplicate key), plus the queue marks (read off the sorted consume-queue keys on the
   way) raised to the ``queue-floors`` retention wrote (as recovery does), the applied
   offset (the log end) and the consumer offsets of the old index when it can be read.
   Then swap it in place of the old index.
5. **Checkpoint**: ``min(log end, PREPARE offset of the oldest open transaction)``, so
   the broker opens with nothing to replay but the open transactions' range.
6. **Audit** (``--parquet OUT``): the record table, a per-queue summary and the
   transaction table as Parquet.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Mapping

import lmdb
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute in last_end_items
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fmq.datadir import (
    CHECKPOINT_FILE,
    INDEX_DIR,
    LOG_DIR,
    QUEUE_FLOORS_FILE,
    DataDirLock,
    index_exists,
)
from fmq.errors import CorruptLog, FMQError, IndexCorrupt, InvalidArgument
from fmq.index import keys as K
from fmq.index.entries import queue_entry, tx_end
from fmq.index.store import IndexStore
from fmq.log.record import NONE, Record, RecordType
from fmq.recovery.checkpoint import write_checkpoint
from fmq.recovery.floors import read_floors
from fmq.spark.errors import RebuildConflict, SparkJobError, TornTail

#: LMDB databases the derived items go to, in the order Spark sorts them (fmq.index.keys).
ITEM_DBS = K.ITEM_DBS
_DB_CQ, _DB_TXENDS = K.DB_CQ, K.DB_TXENDS
ITEMS_SCHEMA = "db int, key binary, value binary"
_ITEMS_ARROW = pa.schema([("db", pa.int32()), ("key", pa.binary()), ("value", pa.binary())])
#: The columns the derivation reads (what queue_entry and the tx table need).
_ENTRY_COLUMNS = ["offset", "size", "type", "store_time", "topic", "queue_id", "queue_offset",
                  "tx_id", "producer_group", "ref_offset", "ref_size", "key", "tags"]
_INDEXED = ("MESSAGE", "REF_MESSAGE", "TX_MESSAGE")
_ENDS = ("COMMIT", "ROLLBACK")
_WRITE_CHUNK = 50_000


# ====================================================================== the derivation


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
        yield out.filter(pa.compute.equal(out.column("db"), _DB_TXENDS))


# ====================================================================== helpers


def _under_spark_submit() -> bool:
    # spark-submit starts the JVM first and hands its port to the Python driver.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(master: str | None, app_name: str = "fmq-index-rebuild"
                  ) -> tuple[SparkSession, bool]:
    """(session, created): the active session if there is one, else a new one on
    ``master`` (None: the master spark-submit was given, else ``local[*]``)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    if master is None and not _under_spark_submit():
        master = "local[*]"
    if master is not None and master.startswith("local"):
        # Executors are local Python workers: they must run this interpreter (which has
        # fmq installed), and a host name that does not resolve must not stall startup.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    session = builder.getOrCreate()
    # Spark's default of 200 shuffle partitions turns every aggregation into 200 tasks
    # (and 200 Python workers where a Python function follows); the job's shuffles are
    # small next to its input, so one partition per core is plenty. A session the caller
    # created keeps its own setting.
    if not session.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        session.conf.set("spark.sql.shuffle.partitions",
                         str(max(2, session.sparkContext.defaultParallelism)))
    return session, True


_CORRUPT_RE = re.compile(
    r"corrupt record in segment (\S+) at log offset (\d+): (.*?)\. Valid records follow it")
_TORN_RE = re.compile(r"torn tail in segment (\S+) at log offset (\d+): (.*?)\. Nothing valid")


def translate_spark_error(exc: BaseException) -> FMQError:
    """A typed FMQ error for a failed Spark action: the executor's CorruptLog / TornTail
    comes back as text inside Spark's exception, so it is parsed out again."""
    text = str(exc)
    m = _CORRUPT_RE.search(text)
    if m:
        return CorruptLog(m.group(1), int(m.group(2)), m.group(3))
    m = _TORN_RE.search(text)
    if m:
        return TornTail(m.group(1), int(m.group(2)), m.group(3))
    for line in text.splitlines():  # Spark's messages open with a useful line
        if line.strip():
            first = line.strip()
            break
    else:
        first = type(exc).__name__
    return SparkJobError(
        f"the Spark job failed: {first[:500]}. Check that every executor has fmq installed "
        f"(pip install 'fmq[spark]') with the driver's Python version and can read the "
        f"segment files at the same path")


def _read_old_index(path: str) -> tuple[dict, dict]:
    """Consumer offsets and queue marks of the old index, if it can be read."""
    if not index_exists(path):
        return {}, {}
    try:
        old = IndexStore(path)
    except IndexCorrupt:
        return {}, {}
    try:
        return old.consumer_offsets(), old.all_queues()
    except Exception:  # noqa: BLE001 - a damaged index: nothing to carry over
        return {}, {}
    finally:
        old.close()


def _put_sorted(store: IndexStore, db_name: str, items: list[tuple[bytes, bytes]]) -> None:
    """Append ``items`` (sorted, unique keys) into ``db_name`` in one transaction, growing
    the map when it is full, and fail loudly if LMDB's append mode skipped any."""
    db = getattr(store, db_name)
    while True:
        try:
            with store.env.begin(write=True) as txn:
                consumed, added = txn.cursor(db=db).putmulti(items, append=True)
            break
        except lmdb.MapFullError:
            # The transaction was aborted: grow the map (no transaction is open now) and
            # write the same batch again.
            store.env.set_mapsize(store.env.info()["map_size"] * 2)
    if consumed != len(items) or added != len(items):
        raise RebuildConflict(
            f"LMDB append mode took {added} of {len(items)} keys in database {db_name}: a key "
            f"was out of order or repeated (first key of the batch {items[0][0]!r}). The log "
            f"holds two records for one index key; run `fmq log verify` and report it")


def _write_items(store: IndexStore, files: list[str]
                 ) -> tuple[dict[str, int], dict[bytes, tuple[int, int]]]:
    """Stream the sorted item files into the LMDB databases in key order. Returns the
    item counts and, read off the sorted consume-queue keys on the way, each queue's
    (first queue offset in the log, last + 1) by queue key."""
    import pyarrow.parquet as pq

    counts = dict.fromkeys(ITEM_DBS, 0)
    marks: dict[bytes, tuple[int, int]] = {}
    current = -1
    pending: list[tuple[bytes, bytes]] = []

    def flush() -> None:
        if pending:
            _put_sorted(store, ITEM_DBS[current], pending)
            counts[ITEM_DBS[current]] += len(pending)
            pending.clear()

    for path in files:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=_WRITE_CHUNK):
            dbs = batch.column("db").to_pylist()
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            for db, k, v in zip(dbs, keys, values, strict=True):
                if db != current:
                    if db < current:
                        raise RebuildConflict("Spark returned the index items out of order; "
                                              "rerun the job (a partial output was left?)")
                    flush()
                    current = db
                if db == _DB_CQ:
                    # cq key = queue key + queue offset (u64 big-endian): sorted keys give
                    # each queue's offsets in ascending order.
                    qkey, qoff = k[:-8], int.from_bytes(k[-8:], "big")
                    lo_hi = marks.get(qkey)
                    marks[qkey] = (qoff if lo_hi is None else lo_hi[0], qoff + 1)
                pending.append((k, v))
                if len(pending) >= _WRITE_CHUNK:
                    flush()
    flush()
    return counts, marks


def _part_files(directory: str) -> list[str]:
    # Spark names output files part-NNNNN-...; after a global sort partition N holds the
    # N-th key range, so name order is key order.
    return sorted(glob.glob(os.path.join(directory, "part-*.parquet")))


def _swap_in(tmp: str, target: str) -> None:
    """Replace ``target`` by ``tmp`` (rename, fsync the parent). A crash between the two
    renames leaves no index: the broker then rebuilds it from the log on open."""
    parent = os.path.dirname(target) or "."
    old = None
    if os.path.exists(target):
        old = f"{target}.old-{os.getpid()}"
        os.rename(target, old)
    os.rename(tmp, target)
    fd = os.open(parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


class _Phases:
    """Seconds spent per pass (reported: it tells where a slow rebuild spends its time)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._t = time.monotonic()

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = round(now - self._t, 3)
        self._t = now


def _uri(path: str) -> str:
    return "file://" + os.path.abspath(path)


# ====================================================================== the job


def run_rebuild(data_dir: str, master: str | None = "local[*]", out_dir: str | None = None,
                parquet_dir: str | None = None) -> dict:
    """Rebuild the index of the stopped broker at ``data_dir`` with Spark.

    Writes a fresh LMDB index at ``out_dir`` (default ``DATA_DIR/index``, replacing it)
    and a checkpoint (``DATA_DIR/checkpoint``, or ``OUT_DIR/checkpoint`` with ``out_dir``:
    copy it next to the index when you move the index in). Returns what it did.
    Raises :class:`~fmq.errors.DataDirLocked` while a broker runs on ``data_dir``,
    :class:`~fmq.errors.CorruptLog` when the log is damaged before valid records.
    """
    t0 = time.monotonic()
    data_dir = os.path.abspath(data_dir)
    log_dir = os.path.join(data_dir, LOG_DIR)
    if not os.path.isdir(log_dir):
        raise InvalidArgument(f"{data_dir} holds no log/ directory: is it an FMQ data dir?")
    in_place = out_dir is None
    target = os.path.join(data_dir, INDEX_DIR) if in_place else os.path.abspath(out_dir)
    checkpoint_path = (os.path.join(data_dir, CHECKPOINT_FILE) if in_place
                       else os.path.join(target, CHECKPOINT_FILE))
    with DataDirLock(data_dir):
        spark, created = spark_session(master)
        try:
            result = _rebuild(spark, data_dir, log_dir, target, checkpoint_path, parquet_dir)
        finally:
            if created:
                spark.stop()
    result["seconds"] = round(time.monotonic() - t0, 3)
    mb = result["log_bytes"] / 1e6
    result["mb_per_second"] = round(mb / result["seconds"], 2) if result["seconds"] else None
    return result


def _rebuild(spark: SparkSession, data_dir: str, log_dir: str, target: str, checkpoint_path: str,
             parquet_dir: str | None) -> dict:
    from fmq.spark.source import SegmentFiles, register

    register(spark)
    segments = SegmentFiles(log_dir).list()
    bases = [b for b, _s in segments]
    max_record = max((s for _b, s in segments), default=0)
    reader = (spark.read.format("fmq").option("mode", "failfast").option("tornTail", "allow"))
    if max_record:
        # The broker's decoder limit is its segment size; a record never exceeds it.
        reader = reader.option("maxRecordSize", str(max_record))
    phases = _Phases()
    raw = reader.load(log_dir).persist(StorageLevel.MEMORY_AND_DISK)
    tmp_index = f"{target}.spark-tmp"
    tmp_items = f"{target}.spark-items"
    try:
        try:
            facts = _derive(raw, len(bases), tmp_items, parquet_dir, phases)
        except FMQError:
            raise
        except Exception as exc:  # noqa: BLE001 - Spark wraps the executor's error
            raise translate_spark_error(exc) from exc
        records = facts["records"]
        torn = facts["torn"]
        end = _log_end(bases, dict(segments), facts["last"])
        opens = facts["open_transactions"]
        # From the first PREPARE of each open transaction: a relocation a crash cut short
        # must be replayed together with the original it did not replace.
        recovery = min([end] + [t["first_prepare_offset"] for t in opens])

        # Pass 4: the LMDB index, next to the target, then swapped in.
        consumers, old_queues = _read_old_index(os.path.join(data_dir, INDEX_DIR))
        shutil.rmtree(tmp_index, ignore_errors=True)
        # LMDB needs a few times the compressed item bytes; the map grows on demand anyway.
        estimate = sum(os.path.getsize(p) for p in _part_files(tmp_items))
        store = IndexStore(tmp_index, map_size=max(1 << 30, 8 * estimate))
        try:
            counts, marks = _write_items(store, _part_files(tmp_items))
            queues = {K.split_queue_key(qkey): lo_hi for qkey, lo_hi in marks.items()}
            # A queue whose every record was deleted by retention has no record left to
            # derive its high-water mark from; the old index still knows it, and losing
            # it would hand out its queue offsets a second time.
            carried = {q: (hi, hi) for q, (_lo, hi) in old_queues.items() if q not in queues}
            queues.update(carried)
            items = sorted((K.queue_key(t, q), K.QUEUE_VALUE.pack(lo, hi))
                           for (t, q), (lo, hi) in queues.items())
            if items:
                _put_sorted(store, "queues", items)
            # The floors retention recorded for the queues it emptied, applied exactly as
            # recovery's pass 5 does (this also covers a lost or unreadable old index).
            floors = read_floors(os.path.join(data_dir, QUEUE_FLOORS_FILE))
            floors_applied = store.apply_floors(floors)
            store.set_applied_offset(end)
            for (group, topic, qid), off in sorted(consumers.items()):
                store.commit_offset(group, topic, qid, off)
            store.sync()
        finally:
            store.close()
        _swap_in(tmp_index, target)
        phases.done("write_lmdb")

        # Pass 5: the checkpoint (after the index is in place: a checkpoint must never
        # claim more than the index it sits next to holds).
        cp = write_checkpoint(checkpoint_path, recovery, end, end)
    finally:
        raw.unpersist()
        shutil.rmtree(tmp_items, ignore_errors=True)
        shutil.rmtree(tmp_index, ignore_errors=True)

    return {
        "data_dir": data_dir,
        "index_dir": target,
        "checkpoint_file": checkpoint_path,
        "master": spark.sparkContext.master,
        "spark_version": spark.version,
        "segments": len(bases),
        "log_start": bases[0] if bases else 0,
        "log_end": end,
        # Bytes of log data read (segment files are preallocated: the active one is
        # mostly zeros, which would flatter the throughput).
        "log_bytes": end - (bases[0] if bases else 0),
        "records": records,
        "queue_entries": counts["cq"],
        "key_entries": counts["keys"],
        "queues": len(queues),
        "queues_carried_over": len(carried),
        "queue_floors_applied": floors_applied,
        "consumer_offsets_kept": len(consumers),
        "torn_tail": torn,
        "open_transactions": opens,
        "checkpoint": cp.to_dict(),
        "parquet": facts["parquet"],
        "phase_seconds": phases.seconds,
    }


def _log_end(bases: list[int], sizes: dict[int, int], last: dict | None) -> int:
    """Where the valid log ends, as :attr:`LogScanner.end_offset` defines it: after the
    last valid record; after a filler, the end of its segment when it is the last one,
    else the base of the next (empty) segment, where the scanner stopped."""
    if last is None:
        return bases[0] if bases else 0
    if last["type"] != "FILLER":
        return last["offset"] + last["size"]
    i = bases.index(last["base"])
    return bases[i] + sizes[bases[i]] if i == len(bases) - 1 else bases[i + 1]


def _derive(raw: DataFrame, partitions: int, tmp_items: str, parquet_dir: str | None,
            phases: _Phases) -> dict:
    """Passes 2, 3 and 6 on Spark; returns the small facts the driver needs."""
    valid = raw.where(F.col("damage").isNull())

    # One pass over the log: record count, the last valid record (where the log ends) and
    # the torn tail (mode=failfast raised on any other damage).
    damaged = F.col("damage").isNotNull()
    summary = raw.agg(
        F.count(F.when(~damaged, F.lit(1))).alias("n"),
        F.max_by(F.struct("offset", "size", "type", "segment"),
                 F.when(~damaged, F.col("offset"))).alias("last"),
        F.max_by(F.struct("segment", "offset", "damage"),
                 F.when(damaged, F.col("offset"))).alias("torn"),
    ).collect()[0]
    t = summary["torn"]
    torn = ({"segment": t["segment"], "offset": t["offset"], "reason": t["damage"]["reason"]}
            if t is not None and t["damage"] is not None else None)
    phases.done("scan")
    last = None
    if summary["last"] is not None:
        from fmq.datadir import parse_segment_name

        lr = summary["last"]
        last = {"offset": lr["offset"], "size": lr["size"], "type": lr["type"],
                "base": parse_segment_name(lr["segment"])}

    # Index items, sorted by (database, key), to a temporary Parquet table.
    indexed = valid.where(F.col("type").isin(*_INDEXED)).select(*_ENTRY_COLUMNS)
    ends = valid.where(F.col("type").isin(*_ENDS)).select(*_ENTRY_COLUMNS)
    last_ends = (ends.groupBy("tx_id")
                 .agg(F.max_by(F.struct(*_ENTRY_COLUMNS), "offset").alias("e"))
                 .select("e.*"))
    # The grouping leaves spark.sql.shuffle.partitions partitions; a Python task each is
    # wasteful for what is one small row per transaction.
    last_ends = last_ends.coalesce(max(1, partitions))
    items = (indexed.unionByName(ends).mapInArrow(index_items, ITEMS_SCHEMA)
             .unionByName(last_ends.mapInArrow(last_end_items, ITEMS_SCHEMA)))
    # A global sort runs its input twice (a sampling pass for the range bounds, then the
    # shuffle): keep the items so the Python derivation runs once.
    items = items.persist(StorageLevel.MEMORY_AND_DISK)
    shutil.rmtree(tmp_items, ignore_errors=True)
    try:
        items.orderBy("db", "key").write.parquet(_uri(tmp_items))
    finally:
        items.unpersist()
    phases.done("derive_and_sort")

    txs = transaction_table(valid)
    opens = [
        {"tx_id": r["tx_id"], "producer_group": r["producer_group"], "state": r["state"],
         "messages": r["messages"], "prepare_offset": r["prepare_offset"],
         "first_prepare_offset": r["first_prepare_offset"], "store_time": r["prepare_time"]}
        for r in txs.where(F.col("state").isin("open", "committing", "incomplete"))
        .orderBy("prepare_offset").collect()
    ]
    phases.done("transactions")
    parquet = None
    if parquet_dir is not None:
        parquet = write_audit(raw, txs, parquet_dir)
        phases.done("audit_parquet")
    return {"records": summary["n"], "torn": torn, "last": last,
            "open_transactions": opens, "parquet": parquet}


def transaction_table(valid: DataFrame) -> DataFrame:
    """One row per transaction id, with redo's semantics (fmq/recovery/recover.py): the
    latest PREPARE opens it; the first COMMIT/ROLLBACK after that ends it; PRE_MESSAGEs
    after it are its messages; a REF/TX after it without an end makes it "committing"
    (the broker rolls it forward on open); fewer PRE_MESSAGEs than the PREPARE announced
    (its ``ref_size``) and no end make it "incomplete" (the broker rolls it back on open),
    unless that PREPARE is a relocation (``ref_offset`` set): a cut relocation leaves the
    original whole, so the transaction is "open" (its message count is then the copy's). A transaction whose PREPARE retention deleted
    is never open ("commit"/"rollback" when its end is still in the log, else "unknown").
    One shuffle: the window and the grouping share the partitioning by tx_id.
    """
    from pyspark.sql import Window

    is_prepare = F.col("type") == "PREPARE"
    ends = F.col("type").isin(*_ENDS)
    tx = (valid.where(F.col("tx_id").isNotNull())
          .select("offset", "type", "tx_id", "producer_group", "store_time", "ref_size",
                  "ref_offset")
          .withColumn("prepare_offset",
                      F.max(F.when(is_prepare, F.col("offset"))).over(Window.partitionBy("tx_id")))
          .withColumn("first_prepare",
                      F.min(F.when(is_prepare, F.col("offset"))).over(Window.partitionBy("tx_id"))))
    after = F.col("prepare_offset").isNull() | (F.col("offset") >= F.col("prepare_offset"))
    table = tx.where(after).groupBy("tx_id").agg(
        F.max("prepare_offset").alias("prepare_offset"),
        F.max_by("producer_group", F.when(is_prepare, F.col("offset"))).alias("producer_group"),
        F.max_by("store_time", F.when(is_prepare, F.col("offset"))).alias("prepare_time"),
        F.max_by("ref_size", F.when(is_prepare, F.col("offset"))).alias("expected"),
        F.max_by("ref_offset", F.when(is_prepare, F.col("offset"))).alias("relocated_from"),
        F.min("first_prepare").alias("first_prepare_offset"),
        F.count(F.when(F.col("type") == "PRE_MESSAGE", 1)).alias("messages"),
        F.count(F.when(F.col("type").isin("REF_MESSAGE", "TX_MESSAGE"), 1)).alias("copies"),
        F.min_by(F.when(ends, F.col("type")), F.when(ends, F.col("offset"))).alias("end"),
        F.min(F.when(ends, F.col("offset"))).alias("end_offset"),
    )
    state = (F.when(F.col("end") == "COMMIT", "commit")
             .when(F.col("end") == "ROLLBACK", "rollback")
             .when(F.col("prepare_offset").isNull(), "unknown")
             .when(F.col("copies") > 0, "committing")
             .when((F.coalesce(F.col("expected"), F.lit(0)) > F.col("messages"))
                   & F.col("relocated_from").isNull(), "incomplete")
             .otherwise("open"))
    return table.select(
        "tx_id", "producer_group", "prepare_offset", "first_prepare_offset", "prepare_time",
        F.col("messages").cast("long").alias("messages"),
        F.col("copies").cast("long").alias("copies"),
        "end_offset", state.alias("state"))


def write_audit(raw: DataFrame, txs: DataFrame, parquet_dir: str) -> dict:
    """``records/`` (every row of the data source, without bodies), ``summary/`` (one row
    per topic and queue) and ``transactions/`` as Parquet under ``parquet_dir``."""
    out = os.path.abspath(parquet_dir)
    valid = raw.where(F.col("damage").isNull())
    raw.write.mode("overwrite").parquet(_uri(os.path.join(out, "records")))
    txs.write.mode("overwrite").parquet(_uri(os.path.join(out, "transactions")))

    # A REF_MESSAGE carries no body: its bytes are its PRE_MESSAGE's body.
    pre = valid.where(F.col("type") == "PRE_MESSAGE").select(
        F.col("offset").alias("ref_offset"), F.col("body_size").alias("pre_body_size"))
    msgs = (valid.where(F.col("type").isin(*_INDEXED)).join(pre, "ref_offset", "left")
            .withColumn("bytes", F.when(F.col("type") == "REF_MESSAGE", F.col("pre_body_size"))
                        .otherwise(F.col("body_size"))))
    per_queue = msgs.groupBy("topic", "queue_id").agg(
        F.count(F.lit(1)).alias("messages"),
        F.sum(F.when(F.col("type") == "MESSAGE", 1).otherwise(0)).alias("plain_messages"),
        F.sum(F.when(F.col("type") != "MESSAGE", 1).otherwise(0)).alias("transactional_messages"),
        F.sum("bytes").alias("bytes"),
        F.min("store_time").alias("first_store_time"),
        F.max("store_time").alias("last_store_time"),
        F.min("queue_offset").alias("min_queue_offset"),
        (F.max("queue_offset") + 1).alias("next_queue_offset"),
    )
    # Transactions touching a queue: those with a PRE_MESSAGE in it.
    tq = (valid.where(F.col("type") == "PRE_MESSAGE").select("topic", "queue_id", "tx_id")
          .distinct().join(txs.select("tx_id", "state"), "tx_id"))
    tx_counts = tq.groupBy("topic", "queue_id").agg(
        F.sum(F.when(F.col("state") == "commit", 1).otherwise(0)).alias("committed_transactions"),
        F.sum(F.when(F.col("state") == "rollback", 1).otherwise(0))
        .alias("rolled_back_transactions"),
        F.sum(F.when(F.col("state").isin("open", "committing"), 1).otherwise(0))
        .alias("open_transactions"),
    )
    summary = per_queue.join(tx_counts, ["topic", "queue_id"], "full_outer")
    zero = ["messages", "plain_messages", "transactional_messages", "bytes",
            "committed_transactions", "rolled_back_transactions", "open_transactions"]
    summary = summary.select(
        "topic", "queue_id",
        *[F.coalesce(F.col(c), F.lit(0)).cast("long").alias(c) for c in zero],
        "first_store_time", "last_store_time", "min_queue_offset", "next_queue_offset",
    ).orderBy("topic", "queue_id")
    summary.write.mode("overwrite").parquet(_uri(os.path.join(out, "summary")))
    return {name: os.path.join(out, name) for name in ("records", "summary", "transactions")}


# ====================================================================== spark-submit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fmq.spark.rebuild",
        description="Rebuild the LMDB index of a stopped FMQ broker from its log on Spark.")
    parser.add_argument("data_dir", help="the broker's data directory (holds log/)")
    parser.add_argument("--master", default=None,
                        help="Spark master URL (default: spark-submit's, else local[*])")
    parser.add_argument("--out", default=None,
                        help="write the index here instead of replacing DATA_DIR/index")
    parser.add_argument("--parquet", default=None,
                        help="also write the record table and summaries as Parquet here")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        result = run_rebuild(args.data_dir, master=args.master, out_dir=args.out,
                             parquet_dir=args.parquet)
    except FMQError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, sort_keys=True, default=str))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    # Run from the imported module, not from __main__: Spark pickles index_items and the
    # other executor functions by reference, and executors import fmq.spark.rebuild.
    from fmq.spark.rebuild import main as _main

    sys.exit(_main())
