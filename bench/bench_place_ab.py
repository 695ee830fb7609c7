"""CPU of the write path's placement, without the network: placing a transaction of one
1 KiB message (PREPARE + PRE_MESSAGE, then REF + COMMIT, with the transaction bookkeeping)
and placing one plain 1 KiB send, on this tree and (optionally) an older checkout, in
alternating fresh processes.

What the event loop spends per request between decoding and answering; the clock is the
placing thread's CPU time (``time.thread_time``), so the index and flush threads and other
processes on a shared machine count less than on the wall clock. Not part of the test
run. Run::

    python bench/bench_place_ab.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--rounds 5] [--n 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Runs in a child with the tree under test first on sys.path; prints one JSON object.
CHILD = r"""
import json, sys, tempfile, time
from fmq.config import BrokerConfig
from fmq.engine.broker import Broker
from fmq.message import Message
n = int(sys.argv[1])
body = b"x" * 1024
with tempfile.TemporaryDirectory() as d:
    b = Broker.open(d, BrokerConfig(flush_mode="sync", checkpoint_interval_ms=0))
    w = b.tx_writer
    for i in range(n // 10):  # warm up: the active segment, caches
        tx, end = w.place_prepare([Message("w", body)], "g", None)
        w.prepare_done(tx)
    t0 = time.thread_time()
    for i in range(n):
        tx, end = w.place_prepare([Message("t", body)], "g", None)
        w.prepare_done(tx)
        placed, end = w.place_commit(tx.tx_id)
        w.commit_done(placed)
    tx_us = (time.thread_time() - t0) / n * 1e6
    b.wait_durable(end)
    t0 = time.thread_time()
    for i in range(n):
        results, end = b.place_batch([Message("s", body)])
    send_us = (time.thread_time() - t0) / n * 1e6
    b.wait_durable(end)
    b.close()
print(json.dumps({"tx_us": tx_us, "send_us": send_us}))
"""


def one_run(tree: str, n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True,
                         text=True, cwd=tree, env=dict(os.environ, PYTHONPATH=tree),
                         check=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", help="an older checkout to compare with (git worktree add)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=20000, help="transactions (and sends) a round")
    args = ap.parse_args()
    trees = {"new": HERE}
    if args.old:
        trees["old"] = os.path.abspath(args.old)
    names = list(trees)
    results: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            res = one_run(trees[name], args.n)
            results[name].append(res)
            print(f"round {r + 1} {name}: {res['tx_us']:.1f} us a transaction, "
                  f"{res['send_us']:.1f} us a send", flush=True)
    for name, rs in results.items():
        parts = []
        for key, what in (("tx_us", "us a transaction"), ("send_us", "us a send")):
            vals = [x[key] for x in rs]
            parts.append(f"{statistics.median(vals):.1f} {what} ({min(vals):.1f}-"
                         f"{max(vals):.1f})")
        print(f"median {name}: " + ", ".join(parts))


if __name__ == "__main__":
    main()
