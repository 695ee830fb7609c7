"""Index rebuild throughput: the in-process rebuild vs the Spark job at local[1] and local[2].

Not part of the test run (pytest's testpaths is tests/). Run it by hand::

    python bench/bench_rebuild.py --size-mb 1100 --dir /tmp/fmq-bench-rebuild

It writes a log of at least ``--size-mb`` MB of 1 KiB messages (``_logdata.build_log``:
:class:`fmq.log.log.Log` directly, no fsync per message), then times

1. ``fmq.admin.rebuild_index.rebuild_index`` (delete the index, recovery replays the log);
2. ``python -m fmq.spark.rebuild DIR --master local[1] --out ...`` and ``local[2]`` in
   fresh processes (so each pays its own JVM start, as an operator would),

reports MB of log per second (log bytes = valid log end - log start), checks that the
three indexes hold the same keys and values (a SHA-256 over every derived database), and
deletes the log unless ``--keep``. Then

3. the data source alone: ``spark.read.format("fmq").load(DIR).select("offset").count()``
   at each master, timed after the session has started (fresh process each), twice: cold
   (the count starts the Python workers) and warm;
4. two 2 MB logs rebuilt with ``python -m fmq.spark.rebuild`` at the last master, wall time
   including the JVM and session start: plain messages (the rebuild skips its whole-log
   queries: nothing for them), and one the broker wrote with transactions and consumer
   offsets (``_logdata.build_mixed_log``); then the session start alone (a fresh process that
   starts a session and stops it: what the JVM takes of the 10 s target).

The 1-minute load average is recorded before and after each run: on a shared machine it
says how much of a run's time was other people's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

from fmq.config import BrokerConfig
from fmq.datadir import INDEX_DIR
from fmq.index.lmdb_env import DERIVED_DBS
from fmq.index.store import IndexStore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cpu import process_cpu  # noqa: E402 - the bench directory is not a package
from _logdata import MB, build_log, build_mixed_log  # noqa: E402


def index_digest(path: str) -> tuple[str, dict[str, int]]:
    """SHA-256 over every key and value of every derived database, and entry counts."""
    store = IndexStore(path)
    h = hashlib.sha256()
    counts = {}
    try:
        with store.env.begin() as txn:  # streamed: dump() would hold every item in memory
            for name in DERIVED_DBS:
                db = store.env.open_db(name, txn=txn, create=False)
                n = 0
                h.update(name)
                for k, v in txn.cursor(db=db):
                    h.update(len(k).to_bytes(4, "little") + k + len(v).to_bytes(4, "little") + v)
                    n += 1
                counts[name.decode()] = n
    finally:
        store.close()
    return h.hexdigest(), counts


_COUNT = """
import os, sys, time
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
from pyspark.sql import SparkSession
from fmq.spark.source import register
spark = (SparkSession.builder.master(sys.argv[2]).config("spark.ui.enabled", "false")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
register(spark)
df = spark.read.format("fmq").option("tornTail", "allow").load(sys.argv[1])
times = []
for _ in range(2):  # the first count also starts the Python workers
    t = time.monotonic()
    n = df.select("offset").count()
    times.append(time.monotonic() - t)
print(n, *times)
spark.stop()
"""


_SESSION = """
import os, sys, time
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
t = time.monotonic()
from fmq.spark.session import spark_session
spark, _created = spark_session(sys.argv[1])
print(time.monotonic() - t)
spark.stop()
"""


def session_start(master: str, env: dict) -> float:
    """Seconds to start the rebuild's Spark session (JVM included) in a fresh process."""
    proc = subprocess.run([sys.executable, "-c", _SESSION, master], env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"session start at {master} failed")
    return float(proc.stdout.strip().splitlines()[-1])


def source_count(data_dir: str, master: str, env: dict) -> tuple[int, float, float]:
    """(rows, seconds cold, seconds warm) of a pruned count() through the data source, in a
    fresh process: the first count starts the Python workers, the second reuses them."""
    proc = subprocess.run([sys.executable, "-c", _COUNT, data_dir, master], env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"source count at {master} failed")
    rows, cold, warm = proc.stdout.strip().splitlines()[-1].split()
    return int(rows), float(cold), float(warm)


def spark_rebuild(data_dir: str, master: str, out: str, env: dict) -> tuple[dict, float]:
    """(the job's JSON result, wall seconds) of ``python -m fmq.spark.rebuild``."""
    t = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "fmq.spark.rebuild", data_dir, "--master", master,
         "--out", out, "--json"], capture_output=True, text=True, check=False, env=env)
    wall = time.monotonic() - t
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"spark rebuild at {master} failed")
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/fmq-bench-rebuild")
    parser.add_argument("--size-mb", type=int, default=1100)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--segment-mb", type=int, default=64)
    parser.add_argument("--masters", default="local[1],local[2]")
    parser.add_argument("--driver-memory", default="2g",
                        help="JVM heap of the Spark driver (with local[N] it runs the tasks)")
    parser.add_argument("--keep", action="store_true", help="keep the log afterwards")
    parser.add_argument("--small-only", action="store_true",
                        help="only the 2 MB logs and the session start (step 4)")
    args = parser.parse_args()

    data_dir = os.path.join(args.dir, "data")
    segment_size = args.segment_mb * 1024 * 1024
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(data_dir)
    results: dict = {"size_mb_target": args.size_mb, "body": args.body,
                     "driver_memory": args.driver_memory,
                     "segment_mb": args.segment_mb, "cpus": os.cpu_count()}
    try:
        masters = args.masters.split(",")
        env = dict(os.environ, PYSPARK_SUBMIT_ARGS=f"--driver-memory {args.driver_memory} "
                                                    f"pyspark-shell")
        if not args.small_only:
            t = time.monotonic()
            end = build_log(data_dir, args.size_mb, args.body, segment_size)
            results["log_bytes"] = end
            results["build_seconds"] = round(time.monotonic() - t, 1)
            print(f"log: {end / MB:.0f} MB in {results['build_seconds']} s", flush=True)

            from fmq.admin.rebuild_index import rebuild_index

            load0 = os.getloadavg()[0]
            t = time.monotonic()
            cpu0 = process_cpu()
            report = rebuild_index(data_dir, BrokerConfig(segment_size=segment_size))
            secs = time.monotonic() - t
            cpu = process_cpu() - cpu0
            digest, counts = index_digest(os.path.join(data_dir, INDEX_DIR))
            results["in_process"] = {"seconds": round(secs, 2),
                                     "mb_per_s": round(end / MB / secs, 1),
                                     "cpu_seconds": round(cpu, 1),
                                     "load_before": round(load0, 1),
                                     "records": report["records_replayed"], "entries": counts}
            print("in-process:", results["in_process"], flush=True)

            for master in masters:
                out = os.path.join(args.dir,
                                   "index-" + master.replace('local[', '').rstrip(']'))
                load0 = os.getloadavg()[0]
                res, wall = spark_rebuild(data_dir, master, out, env)
                same = index_digest(out)[0] == digest
                results[master] = {
                    "wall_seconds": round(wall, 2), "mb_per_s_wall": round(end / MB / wall, 1),
                    "job_seconds": res["seconds"], "phase_seconds": res["phase_seconds"],
                    # (no CPU seconds: the JVM is not a reaped child, getrusage misses it)
                    "load_before": round(load0, 1),
                    "load_after": round(os.getloadavg()[0], 1),
                    "identical_to_in_process": same,
                }
                print(f"{master}:", results[master], flush=True)
            for master in masters:
                load0 = os.getloadavg()[0]
                rows, cold, warm = source_count(data_dir, master, env)
                results[f"source_count {master}"] = {
                    "load_before": round(load0, 1), "rows": rows,
                    "seconds_cold": round(cold, 2), "seconds_warm": round(warm, 2),
                    "mb_per_s_cold": round(end / MB / cold, 1),
                    "mb_per_s_warm": round(end / MB / warm, 1)}
                print(f"source count {master}:", results[f"source_count {master}"], flush=True)
        for kind, build in (("plain", build_log), ("mixed", build_mixed_log)):
            small = os.path.join(args.dir, f"small-{kind}")
            os.makedirs(small)
            small_end = build(small, 2, args.body, 1 << 20)
            load0 = os.getloadavg()[0]
            res, wall = spark_rebuild(small, masters[-1], small + "-index", env)
            name = f"2 MB {kind} log {masters[-1]}"
            results[name] = {"log_bytes": small_end, "wall_seconds": round(wall, 2),
                             "job_seconds": res["seconds"],
                             "phase_seconds": res["phase_seconds"],
                             "load_before": round(load0, 1)}
            print(f"{name}:", results[name], flush=True)
        results["session start"] = round(session_start(masters[-1], env), 2)
        print("session start:", results["session start"], flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
