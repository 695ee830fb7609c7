"""Recovery redo speed (MB/s of log) of this tree, next to an older checkout's, alternating.

Writes a log of 1 KiB messages once (``--mb``), then per round and tree copies it, deletes
the index and the checkpoint (what a kill -9 followed by the loss of the index leaves to
redo) and opens the copy in a fresh process running that tree's code, which reports the
redo's bytes and seconds. Prints each round and the medians. Not part of the test run::

    python bench/bench_redo_ab.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--mb 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WRITE = """
import sys, fmq
cfg = fmq.BrokerConfig(flush_mode="async", checkpoint_interval_ms=0, retention_interval_ms=0)
with fmq.Broker.open(sys.argv[1], cfg) as b:
    batch = [fmq.Message("bench", b"x" * 1024, key=f"k{i % 100}") for i in range(256)]
    for _ in range(int(sys.argv[2])):
        b.send_batch(batch)
"""

REOPEN = """
import json, sys, time, fmq
from fmq.engine.broker import Broker  # imported before the clock starts
cfg = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0)
cpu = time.process_time()
with fmq.Broker.open(sys.argv[1], cfg) as b:
    cpu = time.process_time() - cpu
    r = b.recovery
    print(json.dumps({"bytes": r.bytes_replayed, "seconds": r.seconds, "cpu_seconds": cpu}))
"""


def redo(tree: str, written: str, scratch: str) -> dict:
    copy = os.path.join(scratch, "copy")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(written, copy)
    shutil.rmtree(os.path.join(copy, "index"))
    if os.path.exists(os.path.join(copy, "checkpoint")):
        os.unlink(os.path.join(copy, "checkpoint"))
    out = subprocess.run([sys.executable, "-c", REOPEN, copy], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=tree), cwd=tree, check=True)
    result = json.loads(out.stdout)
    result["mb_per_s"] = result["bytes"] / 1e6 / result["seconds"]
    # The open's CPU time (threads included): steadier than the wall clock on a busy machine.
    result["cpu_mb_per_s"] = result["bytes"] / 1e6 / result["cpu_seconds"]
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", help="an older checkout to compare with (git worktree add)")
    ap.add_argument("--mb", type=int, default=20, help="MB of log to redo")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    trees = {"new": HERE}
    if args.old:
        trees["old"] = os.path.abspath(args.old)
    scratch = tempfile.mkdtemp(prefix="fmq-redo-ab-")
    try:
        written = os.path.join(scratch, "written")
        batches = max(1, args.mb * 1_000_000 // (256 * 1100))
        subprocess.run([sys.executable, "-c", WRITE, written, str(batches)], check=True,
                       env=dict(os.environ, PYTHONPATH=HERE), cwd=HERE)
        names = list(trees)
        results: dict[str, list[dict]] = {name: [] for name in names}
        for n in range(args.rounds):
            for name in names if n % 2 == 0 else names[::-1]:
                r = redo(trees[name], written, scratch)
                results[name].append(r)
                print(f"round {n + 1} {name}: {r['bytes'] / 1e6:.1f} MB in {r['seconds']:.3f} s "
                      f"= {r['mb_per_s']:.0f} MB/s ({r['cpu_mb_per_s']:.0f} MB per CPU second)",
                      flush=True)
        medians = {}
        for name, rs in results.items():
            wall = [r["mb_per_s"] for r in rs]
            cpu = [r["cpu_mb_per_s"] for r in rs]
            medians[name] = (statistics.median(wall), statistics.median(cpu))
            print(f"median {name}: {medians[name][0]:.0f} MB/s ({min(wall):.0f}-{max(wall):.0f}), "
                  f"{medians[name][1]:.0f} MB per CPU second ({min(cpu):.0f}-{max(cpu):.0f})")
        if "old" in medians:
            print(f"new/old: {medians['new'][0] / medians['old'][0]:.2f}x wall, "
                  f"{medians['new'][1] / medians['old'][1]:.2f}x CPU")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
