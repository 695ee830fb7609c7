"""The Spark rebuild per core against the broker's own rebuild, on the same log, side by side.

Not part of the test run (pytest's testpaths is tests/). Run it by hand::

    python bench/bench_spark_scan.py --size-mb 1000 --rounds 3

It writes one log of ``--size-mb`` MB of 1 KiB messages (``_logdata.build_log``), then
runs ``--rounds`` rounds, each of (in this order, every one a fresh process):

1. the in-process rebuild (``fmq.admin.rebuild_index.rebuild_index``: the index deleted,
   recovery's redo replays the log), its wall and CPU seconds (``getrusage``);
2. the Spark rebuild at ``--master`` (default ``local[1]``: one core) in a process that
   starts the session, runs :func:`fmq.spark.rebuild.run_rebuild` on it (``--out``), runs
   it again in the same session (warm: the JVM's and the Python worker's start-up for the
   first job excluded, what each further GB costs), then counts the rows of the data source
   (``select("offset").count()``).
   CPU seconds are read from ``/proc`` for the whole process tree (the Python driver, the
   JVM, Spark's Python daemon and workers, with the children each has reaped) before and
   after each step: the session start, the rebuild, the count.

With ``--class-archive PATH`` every round runs step 2 a second time with
``FMQ_SPARK_CLASS_ARCHIVE=PATH`` (the session's JVM started from a class archive,
docs/spark.md, *A JVM class archive*; made first with ``python -m fmq.spark.class_archive``
when PATH does not exist), side by side with the plain one: its figures carry ``cds_``
(``--skip-plain``: only the run with the archive).

``--variant NAME`` adds a Spark step per round, run right after the others (with the class
archive when one is given), whose figures carry ``NAME_``: ``--variant-conf NAME
KEY=VALUE`` gives it a Spark setting and ``--variant-env NAME KEY=VALUE`` an environment
variable (``PYTHONPATH=DIR``: another tree's ``fmq``, to compare code side by side).
Each is repeatable.

It prints the medians of the rounds: seconds and CPU seconds per GB of log, and the
ratios the issue sets targets for (Spark rebuild CPU per GB over the in-process one's;
``local[1]`` wall over the in-process wall plus the session start). The first round's page
cache is warm as well (the log was just written), so every round reads from memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
from _logdata import MB, build_log, log_end  # noqa: E402 - the bench directory is not a package

GB = 1_000_000_000

# The steps below run as ``python -c`` in fresh processes, the bench directory first on
# their sys.path (run_json): they read CPU seconds with _cpu's helpers.
_IN_PROCESS = """
import json, sys, time
from _cpu import process_cpu
from fmq.admin.rebuild_index import rebuild_index
from fmq.config import BrokerConfig
t, c = time.monotonic(), process_cpu()
report = rebuild_index(sys.argv[1], BrokerConfig(segment_size=int(sys.argv[2])))
print(json.dumps({"seconds": time.monotonic() - t, "cpu": process_cpu() - c,
                  "records": report["records_replayed"]}))
"""

_SPARK = """
import json, sys, time
from _cpu import spent, tree_cpu

data_dir, out, master = sys.argv[1], sys.argv[2], sys.argv[3]
c0 = tree_cpu()
t0 = time.monotonic()
from fmq.spark.rebuild import run_rebuild
from fmq.spark.session import spark_session
from fmq.spark.source import register
spark, _created = spark_session(master)
spark.sparkContext.setLogLevel("ERROR")
t1, c1 = time.monotonic(), tree_cpu()
result = run_rebuild(data_dir, master, out)
t2, c2 = time.monotonic(), tree_cpu()
# Again in the same session: the JVM and the Python worker warm (what each further GB
# costs, the start-up of the first job excluded).
import shutil
shutil.rmtree(out)
result_warm = run_rebuild(data_dir, master, out)
t3, c3 = time.monotonic(), tree_cpu()
register(spark)
rows = (spark.read.format("fmq").option("tornTail", "allow").load(data_dir)
        .select("offset").count())
t4, c4 = time.monotonic(), tree_cpu()
print(json.dumps({"session_seconds": t1 - t0, "session_cpu": spent(c0, c1),
                  "rebuild_seconds": t2 - t1, "rebuild_cpu": spent(c1, c2),
                  "phase_seconds": result["phase_seconds"], "records": result["records"],
                  "warm_seconds": t3 - t2, "warm_cpu": spent(c2, c3),
                  "warm_phase_seconds": result_warm["phase_seconds"],
                  "count_seconds": t4 - t3, "count_cpu": spent(c3, c4),
                  "count_rows": rows}))
spark.stop()
"""


def run_json(code: str, args: list[str], env: dict, cwd: str) -> dict:
    """The JSON a fresh ``python -c code args`` prints last, and its wall seconds. ``cwd``:
    a directory without an ``fmq`` of its own (``python -c`` puts the working directory
    first on the path, before a variant's PYTHONPATH)."""
    t = time.monotonic()
    code = f"import sys; sys.path.insert(0, {BENCH_DIR!r})\n{code}"
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, check=False, cwd=cwd)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit("a benchmark step failed")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_seconds"] = time.monotonic() - t
    return out


def _median(rounds: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/fmq-bench-spark-scan")
    parser.add_argument("--size-mb", type=int, default=1000)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--segment-mb", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[1]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the Spark steps (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the log afterwards")
    parser.add_argument("--class-archive", metavar="PATH",
                        help="also run each Spark step with this JVM class archive (made "
                             "first when missing)")
    parser.add_argument("--skip-plain", action="store_true",
                        help="with --class-archive: no Spark step without the archive")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME",
                        help="one more Spark step per round (repeatable)")
    parser.add_argument("--variant-conf", action="append", default=[], nargs=2,
                        metavar=("NAME", "KEY=VALUE"), help="a Spark setting of a variant")
    parser.add_argument("--variant-env", action="append", default=[], nargs=2,
                        metavar=("NAME", "KEY=VALUE"),
                        help="an environment variable of a variant")
    parser.add_argument("--data", help="an existing data directory written by this script "
                                       "(--keep) or _logdata.build_log: no log is written")
    args = parser.parse_args()

    data_dir = args.data or os.path.join(args.dir, "data")
    segment_size = args.segment_mb * 1024 * 1024
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    if not args.data:
        os.makedirs(data_dir)
    env = _spark_env(args.driver_memory, args.conf)
    if args.class_archive and not os.path.isfile(args.class_archive):
        subprocess.run([sys.executable, "-m", "fmq.spark.class_archive", args.class_archive],
                       env=env, check=True)
    steps = _spark_steps(args, env)
    results: dict = {"size_mb": args.size_mb, "master": args.master, "cpus": os.cpu_count(),
                     "conf": args.conf, "rounds": []}
    try:
        if args.data:
            end = log_end(data_dir)
        else:
            end = build_log(data_dir, args.size_mb, args.body, segment_size)
        gb = end / GB
        results["log_bytes"] = end
        for i in range(args.rounds):
            load = os.getloadavg()[0]
            own = run_json(_IN_PROCESS, [data_dir, str(segment_size)], env, args.dir)
            out = os.path.join(args.dir, "index-spark")
            row = {"load_before": round(load, 2),
                   "in_process_seconds": own["seconds"], "in_process_cpu": own["cpu"]}
            records = [own["records"]]
            for tag, step_env in steps:
                shutil.rmtree(out, ignore_errors=True)
                spark = run_json(_SPARK, [data_dir, out, args.master], step_env, args.dir)
                row.update(_spark_figures(tag, spark))
                records += [spark["records"], spark["count_rows"]]
            row["records"] = records
            results["rounds"].append(row)
            print(f"round {i + 1}:", json.dumps({k: round(v, 2) if isinstance(v, float) else v
                                                  for k, v in row.items()}), flush=True)
        rounds = results["rounds"]
        med = {key: round(_median(rounds, key), 2) for key in rounds[0]
               if isinstance(rounds[0][key], (int, float))
               and not isinstance(rounds[0][key], bool)}
        results["median"] = med
        own_wall, own_cpu = med["in_process_seconds"], med["in_process_cpu"]
        results["per_gb"] = {"in_process_cpu_s": round(own_cpu / gb, 2),
                             "in_process_mb_s": round(end / MB / own_wall, 1)}
        results["targets"] = {}
        for tag, _env in steps:
            per_gb, targets = _per_gb_and_targets(med, tag, end, own_wall, own_cpu)
            results["per_gb"].update(per_gb)
            results["targets"].update(targets)
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    print(json.dumps(results, indent=2))
    return 0


def _spark_env(driver_memory: str, confs: list[str], base: dict | None = None) -> dict:
    """The environment of a Spark step: ``confs`` (KEY=VALUE) through PYSPARK_SUBMIT_ARGS."""
    # Quoted: pyspark splits PYSPARK_SUBMIT_ARGS like a shell (JVM options hold spaces).
    given = "".join(f"--conf {shlex.quote(c)} " for c in confs)
    return dict(base if base is not None else os.environ,
                PYSPARK_SUBMIT_ARGS=f"--driver-memory {driver_memory} {given}pyspark-shell")


def _spark_steps(args: argparse.Namespace, env: dict) -> list[tuple[str, dict]]:
    """(tag, environment) of each Spark step of a round, in the order they run."""
    steps = []
    if not (args.class_archive and args.skip_plain):
        steps.append(("", env))
    base = env
    if args.class_archive:
        base = dict(env, FMQ_SPARK_CLASS_ARCHIVE=args.class_archive)
        steps.append(("cds_", base))
    for name in args.variant:
        confs = args.conf + [c for n, c in args.variant_conf if n == name]
        extra = dict(kv.split("=", 1) for n, kv in args.variant_env if n == name)
        steps.append((f"{name}_", _spark_env(args.driver_memory, confs, dict(base, **extra))))
    unknown = {n for n, _ in args.variant_conf + args.variant_env} - set(args.variant)
    if unknown:
        raise SystemExit(f"--variant-conf/--variant-env name no --variant: {sorted(unknown)}")
    return steps


def _spark_figures(tag: str, spark: dict) -> dict:
    """One Spark step's figures for a round's row, each key starting with ``tag`` +
    ``spark_`` (``tag``: "" plain, "cds_" with the class archive)."""
    p = f"{tag}spark"
    return {
        f"{p}_session_seconds": spark["session_seconds"],
        f"{p}_session_cpu": sum(spark["session_cpu"].values()),
        f"{p}_rebuild_seconds": spark["rebuild_seconds"],
        f"{p}_rebuild_cpu": sum(spark["rebuild_cpu"].values()),
        **{f"{p}_rebuild_cpu_{k}": v for k, v in spark["rebuild_cpu"].items()},
        f"{p}_warm_rebuild_seconds": spark["warm_seconds"],
        f"{p}_warm_rebuild_cpu": sum(spark["warm_cpu"].values()),
        **{f"{p}_warm_rebuild_cpu_{k}": v for k, v in spark["warm_cpu"].items()},
        f"{p}_scan_seconds": spark["phase_seconds"].get("scan"),
        f"{p}_warm_scan_seconds": spark["warm_phase_seconds"].get("scan"),
        f"{p}_write_lmdb_seconds": spark["phase_seconds"].get("write_lmdb"),
        f"{p}_count_seconds": spark["count_seconds"],
        f"{p}_count_cpu": sum(spark["count_cpu"].values()),
        **{f"{p}_count_cpu_{k}": v for k, v in spark["count_cpu"].items()},
    }


def _per_gb_and_targets(med: dict, tag: str, end: int, own_wall: float, own_cpu: float
                        ) -> tuple[dict, dict]:
    """The per-GB figures and the issue's ratios of the Spark steps ``tag`` names."""
    gb = end / GB
    p = f"{tag}spark"
    per_gb = {
        f"{p}_rebuild_cpu_s": round(med[f"{p}_rebuild_cpu"] / gb, 2),
        f"{p}_warm_rebuild_cpu_s": round(med[f"{p}_warm_rebuild_cpu"] / gb, 2),
        f"{p}_count_cpu_s": round(med[f"{p}_count_cpu"] / gb, 2),
        f"{p}_session_cpu_s": round(med[f"{p}_session_cpu"], 2),
        f"{p}_rebuild_mb_s": round(end / MB / med[f"{p}_rebuild_seconds"], 1),
        f"{p}_count_mb_s": round(end / MB / med[f"{p}_count_seconds"], 1),
    }
    targets = {
        # issue 42: <= 2x the in-process rebuild's CPU seconds per GB
        f"{tag}cpu_ratio": round(med[f"{p}_rebuild_cpu"] / own_cpu, 2),
        # the same, the session's first job's start-up excluded (a warm session)
        f"{tag}cpu_ratio_warm": round(med[f"{p}_warm_rebuild_cpu"] / own_cpu, 2),
        # issue 42: local[1] wall <= 2x in process + the session start
        f"{tag}wall_ratio_after_session": round(med[f"{p}_rebuild_seconds"] / own_wall, 2),
        f"{tag}wall_limit_seconds": round(2 * own_wall + med[f"{p}_session_seconds"], 2),
        f"{tag}wall_seconds": round(med[f"{p}_session_seconds"]
                                    + med[f"{p}_rebuild_seconds"], 2),
    }
    return per_gb, targets


if __name__ == "__main__":
    sys.exit(main())
