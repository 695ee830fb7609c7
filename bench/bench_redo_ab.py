"""Recovery redo speed (MB/s of log) of this tree, next to an older checkout's, alternating.

Writes a log of 1 KiB messages once (``--mb``), then per round and tree copies it, deletes
the index and the checkpoint (what a kill -9 followed by the loss of the index leaves to
redo) and opens the copy in a fresh process running that tree's code, which reports the
redo's bytes and seconds. Prints each round and the medians. Not part of the test run::

    python bench/bench_redo_ab.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--mb 20] [--rounds 5]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.ab_rounds import HERE, alternate, median, parser, scratch, spread, trees  # noqa: E402

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


def index_less_copy(written: str, scratch: str) -> str:
    """A copy of the data directory ``written`` in ``scratch`` without its index and
    checkpoint: what a kill -9 followed by the loss of the index leaves to redo."""
    copy = os.path.join(scratch, "copy")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(written, copy)
    shutil.rmtree(os.path.join(copy, "index"))
    if os.path.exists(os.path.join(copy, "checkpoint")):
        os.unlink(os.path.join(copy, "checkpoint"))
    return copy


def redo(tree: str, written: str, scratch: str) -> dict:
    copy = index_less_copy(written, scratch)
    out = subprocess.run([sys.executable, "-c", REOPEN, copy], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=tree), cwd=tree, check=True)
    result = json.loads(out.stdout)
    result["mb_per_s"] = result["bytes"] / 1e6 / result["seconds"]
    # The open's CPU time (threads included): steadier than the wall clock on a busy machine.
    result["cpu_mb_per_s"] = result["bytes"] / 1e6 / result["cpu_seconds"]
    return result


def show(name: str, r: dict) -> str:
    return (f"{name}: {r['bytes'] / 1e6:.1f} MB in {r['seconds']:.3f} s = {r['mb_per_s']:.0f} "
            f"MB/s ({r['cpu_mb_per_s']:.0f} MB per CPU second)")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--mb", type=int, default=20, help="MB of log to redo")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    paths = trees(args.old)
    with scratch("fmq-redo-ab-") as d:
        written = os.path.join(d, "written")
        batches = max(1, args.mb * 1_000_000 // (256 * 1100))
        subprocess.run([sys.executable, "-c", WRITE, written, str(batches)], check=True,
                       env=dict(os.environ, PYTHONPATH=HERE), cwd=HERE)
        results = alternate(list(paths), args.rounds,
                            lambda name: redo(paths[name], written, d), show)
    for name, rs in results.items():
        print(f"median {name}: {spread(rs, 'mb_per_s', '.0f', 'MB/s')}, "
              f"{spread(rs, 'cpu_mb_per_s', '.0f', 'MB per CPU second')}")
    if "old" in results:
        new, old = results["new"], results["old"]
        print(f"new/old: {median(new, 'mb_per_s') / median(old, 'mb_per_s'):.2f}x wall, "
              f"{median(new, 'cpu_mb_per_s') / median(old, 'cpu_mb_per_s'):.2f}x CPU")


if __name__ == "__main__":
    main()
