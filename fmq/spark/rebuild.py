"""The index rebuild as a Spark job: read the raw segments in parallel, derive the index
with the online dispatcher's own function, write a fresh LMDB index and a checkpoint.

Run it as ``fmq index rebuild DATA_DIR --spark [--master URL] [--out DIR] [--parquet DIR]``
or ``spark-submit -m``-style: ``spark-submit --master URL $(python -c 'import
fmq.spark.rebuild as m; print(m.__file__)') DATA_DIR [--out DIR] [--parquet DIR]``
(``python -m fmq.spark.rebuild DATA_DIR`` runs it with ``local[*]``).

Passes:

1. **Lock** the data directory (the broker's ``LOCK`` file, ``flock``): refuse while a
   broker runs on it.
2. **Read** the log once (:mod:`fmq.spark.scan`): one task per segment or range of one,
   each reading with the data source's reader (``mode=failfast``, ``tornTail=allow``)
   in one Python RDD pass: corruption fails the job naming segment
   and offset (as recovery would); a torn tail is reported (the broker cuts it on its
   next open; this job never writes to the log).
3. **Derive** in the same tasks: the MESSAGE / REF_MESSAGE / TX_MESSAGE / COMMIT /
   ROLLBACK rows become, column-wise per Arrow batch (:mod:`fmq.spark.items`), the LMDB
   keys and values :func:`fmq.index.keys.entry_items` and ``end_items`` give for
   :func:`fmq.index.entries.queue_entry` and ``tx_end``, sorted per task into an Arrow
   file next to the output. The rows that need the whole log go to a side file per task;
   only where there are such rows, a DataFrame over those files (cached) gives, at once:
   the last end of each transaction and the pending timers (:mod:`fmq.spark.derive`),
   the open transactions (:mod:`fmq.spark.transactions`) and the consumer offsets.
4. **Write** a fresh LMDB environment (:mod:`fmq.spark.bulk_load`), merging the sorted
   files, in key order with
   ``putmulti(append=True)``, checking the counts it returns (append mode silently skips
   an out-of-order or duplicate key), plus the queue marks (read off the sorted
   consume-queue keys on the way) raised to the ``queue-floors`` retention wrote (as
   recovery does), the applied offset (the log end) and the consumer offsets (the latest
   OFFSET record of each group and queue; an old index from before offsets were log
   records has its own carried over) and the topics' configurations (TOPIC records in log
   order, a delete's queue floors raised over the loaded entries, as the online index
   does). Then swap it in place of the old index
   (:mod:`fmq.spark.swap`).
5. **Checkpoint**: ``min(log end, PREPARE offset of the oldest open transaction, the
   oldest idempotent send younger than dedup_window_ms)``, so the broker opens with
   nothing to replay but the open transactions' range and what rebuilds its dedup window
   (:mod:`fmq.dedup`).
6. **Audit** (``--parquet OUT``, :mod:`fmq.spark.audit`): the record table, per-queue
   and per-topic summaries and the transaction table as Parquet.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fmq.config import BrokerConfig
from fmq.datadir import CHECKPOINT_FILE, INDEX_DIR, LOG_DIR, DataDirLock, parse_segment_name
from fmq.errors import FMQError, InvalidArgument
from fmq.index.entries import EpochEntry, TopicEntry
from fmq.log.placement import now_ms
from fmq.log.scanner import log_end
from fmq.recovery.checkpoint import write_checkpoint
from fmq.spark.audit import write_audit
from fmq.spark.bulk_load import load_index
from fmq.spark.derive import END_TYPES, TIMER_TYPE, write_cross_segment_items
from fmq.spark.errors import translate_spark_error
from fmq.spark.files import SegmentFiles
from fmq.spark.scan import ScanJob, scan_tasks, side_rows
from fmq.spark.session import spark_session
from fmq.spark.source import DEFAULT_SPLIT_BYTES, FmqReader, register
from fmq.spark.summary import summary_text
from fmq.spark.swap import swap_in
from fmq.spark.transactions import TX_TYPES, open_transactions, transaction_table

#: The smallest range the rebuild splits a segment into.
MIN_SPLIT_BYTES = 8 << 20


class _Phases:
    """Seconds spent per pass (reported: it tells where a slow rebuild spends its time)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._t = time.monotonic()

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = round(now - self._t, 3)
        self._t = now


def run_rebuild(data_dir: str, master: str | None = "local[*]", out_dir: str | None = None,
                parquet_dir: str | None = None,
                dedup_window_ms: int = BrokerConfig.dedup_window_ms,
                range_bytes: int | None = None) -> dict:
    """Rebuild the index of the stopped broker at ``data_dir`` with Spark.

    Writes a fresh LMDB index at ``out_dir`` (default ``DATA_DIR/index``, replacing it)
    and a checkpoint (``DATA_DIR/checkpoint``, or ``OUT_DIR/checkpoint`` with ``out_dir``:
    copy it next to the index when you move the index in). The checkpoint keeps the
    idempotent sends of the last ``dedup_window_ms`` (the broker's setting) to replay.
    ``range_bytes``: read segments in ranges of about this size, one task each (default:
    :func:`split_bytes`). Returns what it did.
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
            result = _rebuild(spark, data_dir, log_dir, target, checkpoint_path, parquet_dir,
                              now_ms() - dedup_window_ms, range_bytes)
        finally:
            if created:
                spark.stop()
    result["seconds"] = round(time.monotonic() - t0, 3)
    mb = result["log_bytes"] / 1e6
    result["mb_per_second"] = round(mb / result["seconds"], 2) if result["seconds"] else None
    return result


def _rebuild(spark: SparkSession, data_dir: str, log_dir: str, target: str, checkpoint_path: str,
             parquet_dir: str | None, dedup_since: int, range_bytes: int | None) -> dict:
    segments = SegmentFiles(log_dir).list()
    bases = [b for b, _s in segments]
    # The broker's decoder limit is its segment size; a record never exceeds it.
    if range_bytes is None:
        range_bytes = split_bytes(segments, spark.sparkContext.defaultParallelism)
    options = {"mode": "failfast", "torntail": "allow", "splitbytes": str(range_bytes)}
    max_record = max((s for _b, s in segments), default=0)
    if max_record:
        options["maxrecordsize"] = str(max_record)
    phases = _Phases()
    tmp_index = f"{target}.spark-tmp"
    tmp_items = f"{target}.spark-items"
    try:
        try:
            facts = _derive(spark, log_dir, options, tmp_items, parquet_dir, phases,
                            dedup_since)
        except FMQError:
            raise
        except Exception as exc:  # noqa: BLE001 - Spark wraps the executor's error
            raise translate_spark_error(exc) from exc
        last = facts["last"]
        end = log_end(bases, dict(segments), last and last["base"],
                      last["offset"] + last["size"] if last else 0,
                      last is not None and last["type"] == "FILLER")
        opens = facts["open_transactions"]
        # From the first PREPARE of each open transaction: a relocation a crash cut short
        # must be replayed together with the original it did not replace.
        # And from the oldest idempotent send the dedup window may still remember.
        recovery = min([end] + [t["first_prepare_offset"] for t in opens]
                       + [o for o in (facts["dedup_from"],) if o is not None])

        # Pass 4: the LMDB index, next to the target, then swapped in.
        shutil.rmtree(tmp_index, ignore_errors=True)
        loaded = load_index(tmp_index, tmp_items, os.path.join(data_dir, INDEX_DIR), data_dir,
                            end, facts["consumer_offsets"], facts["epochs"],
                            facts["topics"])
        swap_in(tmp_index, target)
        phases.done("write_lmdb")

        # Pass 5: the checkpoint (after the index is in place: a checkpoint must never
        # claim more than the index it sits next to holds).
        cp = write_checkpoint(checkpoint_path, recovery, end, end)
    finally:
        shutil.rmtree(tmp_items, ignore_errors=True)
        shutil.rmtree(tmp_index, ignore_errors=True)

    return {
        "data_dir": data_dir,
        "index_dir": target,
        "checkpoint_file": checkpoint_path,
        "master": spark.sparkContext.master,
        "spark_version": spark.version,
        "segments": len(bases),
        "scan_tasks": facts["scan_tasks"],
        "log_start": bases[0] if bases else 0,
        "log_end": end,
        # Bytes of log data read (segment files are preallocated: the active one is
        # mostly zeros, which would flatter the throughput).
        "log_bytes": end - (bases[0] if bases else 0),
        "records": facts["records"],
        "queue_entries": loaded.counts["cq"],
        "key_entries": loaded.counts["keys"],
        "queues": len(loaded.queues),
        "queues_carried_over": loaded.carried,
        "queue_floors_applied": loaded.floors_applied,
        "consumer_offsets": loaded.consumers,
        "consumer_offsets_from_log": loaded.consumers_from_log,
        "torn_tail": facts["torn"],
        "open_transactions": opens,
        "checkpoint": cp.to_dict(),
        "parquet": facts["parquet"],
        "phase_seconds": phases.seconds,
    }


def split_bytes(segments: list[tuple[int, int]], parallelism: int) -> int:
    """The range size the scan splits segments into: about three tasks per core over the
    log (so a slow task does not leave a core idle), never ranges under 8 MiB (each task
    has a fixed cost) nor over the source's default."""
    total = sum(size for _base, size in segments)
    return max(MIN_SPLIT_BYTES, min(DEFAULT_SPLIT_BYTES, -(-total // (3 * max(1, parallelism)))))


def _derive(spark: SparkSession, log_dir: str, options: dict, tmp_items: str,
            parquet_dir: str | None, phases: _Phases, dedup_since: int) -> dict:
    """Passes 2, 3 and 6 on Spark; returns the small facts the driver needs (and the
    offset of the first idempotent send stored at or after ``dedup_since``)."""
    shutil.rmtree(tmp_items, ignore_errors=True)
    os.makedirs(tmp_items)
    side_dir = os.path.join(tmp_items, "side")
    os.makedirs(side_dir)
    # Pass 2 and most of 3: one scan (fmq.spark.scan) writes the items of every record
    # and the rows that need the whole log to files, and sends back one summary per task.
    job = ScanJob(FmqReader(log_dir, options), tmp_items, dedup_since, side_dir)
    tasks = len(job.partitions)
    summaries = (spark.sparkContext.parallelize(range(tasks), max(1, tasks))
                 .mapPartitions(partial(scan_tasks, job)).collect())
    facts = _scan_facts(summaries)
    facts["scan_tasks"] = tasks
    phases.done("scan")
    # The whole-log queries run only where the scan found rows for them (a log of plain
    # messages needs none): a DataFrame over the side files, cached, since up to five
    # queries read it; few rows: one task per core. They run at once, from threads of
    # their own: each is mostly fixed cost (planning, shuffle set-up), and one's latency
    # hides behind another's.
    found = facts.pop("side_types")
    records = (side_rows(spark, side_dir, tasks).persist(StorageLevel.MEMORY_AND_DISK)
               if found or parquet_dir is not None else None)
    try:
        # Planning the table costs a second of py4j calls: only when something reads it.
        txs = (transaction_table(records.where(F.col("type").isin(*TX_TYPES)))
               if parquet_dir is not None or any(found.get(t) for t in TX_TYPES) else None)
        with ThreadPoolExecutor(3) as pool:
            cross = (pool.submit(write_cross_segment_items, records, tmp_items)
                     if any(found.get(t) for t in (*END_TYPES, TIMER_TYPE)) else None)
            opens = pool.submit(open_transactions, txs) if txs is not None else None
            offsets = (pool.submit(consumer_offsets, records.where(F.col("type") == "OFFSET"))
                       if found.get("OFFSET") else None)
            facts["open_transactions"] = [] if opens is None else opens.result()
            facts["consumer_offsets"] = {} if offsets is None else offsets.result()
            # The epoch history: one small row per primary's term (EPOCH records are rare).
            facts["epochs"] = ([EpochEntry(r["queue_offset"], r["offset"], r["producer_group"])
                                for r in records.where(F.col("type") == "EPOCH")
                                .select("queue_offset", "offset", "producer_group").collect()]
                               if found.get("EPOCH") else [])
            # Topic configurations: one small row per topic create, alter or delete.
            facts["topics"] = ([TopicEntry(r["topic"], r["config"] or "", r["offset"])
                                for r in records.where(F.col("type") == "TOPIC")
                                .select("topic", "config", "offset").orderBy("offset")
                                .collect()]
                               if found.get("TOPIC") else [])
            if cross is not None:
                cross.result()
        phases.done("whole_log_queries")
        facts["parquet"] = None
        if parquet_dir is not None:
            raw = _source(spark, log_dir, options)
            facts["parquet"] = write_audit(raw, txs, parquet_dir)
            phases.done("audit_parquet")
    finally:
        if records is not None:
            records.unpersist()
    return facts


def _source(spark: SparkSession, log_dir: str, options: dict) -> DataFrame:
    # Registered only here, for the audit: registering the first Python data source of a
    # session makes Spark look up every installed one in a fresh Python process (which
    # imports pyspark from its zip, compiling it: 3 CPU seconds measured), and the scan
    # itself plans no data source.
    register(spark)
    reader = spark.read.format("fmq")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load(log_dir)


def _scan_facts(summaries: list[dict]) -> dict:
    """Record count, the last valid record (where the log ends), the torn tail (failfast
    raised on any other damage), the first idempotent send in the dedup window and the
    side rows of each record type, from the scan's summaries (:mod:`fmq.spark.scan`)."""
    ends = [s["last"] for s in summaries if s["last"] is not None]
    lr = max(ends, key=lambda r: r["offset"]) if ends else None
    last = None if lr is None else {"offset": lr["offset"], "size": lr["size"],
                                    "type": lr["type"], "base": parse_segment_name(lr["segment"])}
    damage = [d for s in summaries for d in s["damage"]]
    t = max(damage, key=lambda r: r["offset"]) if damage else None
    torn = (None if t is None else
            {"segment": t["segment"], "offset": t["offset"], "reason": t["damage"]["reason"]})
    dedup = [s["dedup_from"] for s in summaries if s["dedup_from"] is not None]
    side_types: dict[str, int] = {}
    for s in summaries:
        for rtype, n in s["side_types"].items():
            side_types[rtype] = side_types.get(rtype, 0) + n
    return {"records": sum(s["records"] for s in summaries), "torn": torn, "last": last,
            "dedup_from": min(dedup, default=None), "side_types": side_types}


def consumer_offsets(rows: DataFrame) -> dict[tuple[str, str, int], tuple[int, int]]:
    """(next offset, record offset) of the latest OFFSET row of each (group, topic, queue):
    what the dispatcher's last write leaves. One small row per queue a group committed."""
    latest = (rows.groupBy("producer_group", "topic", "queue_id")
              .agg(F.max_by(F.struct("queue_offset", "offset"), "offset").alias("o"))
              .collect())
    return {(r["producer_group"], r["topic"], r["queue_id"]): (r["o"]["queue_offset"],
                                                                r["o"]["offset"])
            for r in latest}


def main(argv: list[str] | None = None) -> int:
    """The command line of ``python -m fmq.spark.rebuild`` and ``spark-submit``: prints
    what the job did (``--json``: as one JSON line); returns the exit status."""
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
        print(summary_text(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
