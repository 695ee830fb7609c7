"""CPU of the write path's placement, without the network: placing a transaction of one
1 KiB message (PREPARE + PRE_MESSAGE, then REF + COMMIT, with the transaction bookkeeping),
placing one plain 1 KiB send, and placing batches of 256 of them (half keyed: what
SEND_BATCH and a turn of the server's batcher place), per message, on this tree and
(optionally) an older checkout, in alternating fresh processes.

What the event loop spends per request between decoding and answering; the clock is the
placing thread's CPU time (``time.thread_time``), so the index and flush threads and other
processes on a shared machine count less than on the wall clock. Not part of the test
run. Run::

    python bench/bench_place_ab.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--rounds 5] [--n 20000]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.ab_rounds import alternate, parser, spread, trees  # noqa: E402

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
    w = b._tx_writer
    for i in range(n // 10):  # warm up: the active segment, caches
        tx, end = w.place_prepare([Message("w", body)], "g", None)
        w.prepare_done(tx)
    t0 = time.thread_time()
    for i in range(n):
        tx, end = w.place_prepare([Message("t", body)], "g", None)
        w.prepare_done(tx)
        placed, end = w.place_commit("g", tx.tx_id)
        w.commit_done(placed)
    tx_us = (time.thread_time() - t0) / n * 1e6
    b.wait_durable(end)
    t0 = time.thread_time()
    for i in range(n):
        results, end = b.place_batch([Message("s", body)])
    send_us = (time.thread_time() - t0) / n * 1e6
    b.wait_durable(end)
    batch = [Message("s", body, key=f"k{i}" if i % 2 else None) for i in range(256)]
    t0 = time.thread_time()
    for i in range(max(n // 256, 1)):
        results, end = b.place_batch(batch)
    batch_us = (time.thread_time() - t0) / (max(n // 256, 1) * 256) * 1e6
    b.wait_durable(end)
    b.close()
print(json.dumps({"tx_us": tx_us, "send_us": send_us, "batch_us": batch_us}))
"""


def one_run(tree: str, n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True,
                         text=True, cwd=tree, env=dict(os.environ, PYTHONPATH=tree),
                         check=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=20000, help="transactions (and sends) a round")
    args = ap.parse_args()
    paths = trees(args.old)
    results = alternate(list(paths), args.rounds, lambda name: one_run(paths[name], args.n),
                        lambda name, res: f"{name}: {res['tx_us']:.1f} us a transaction, "
                                          f"{res['send_us']:.1f} us a send, "
                                          f"{res['batch_us']:.2f} us a message of a batch")
    for name, rs in results.items():
        print(f"median {name}: {spread(rs, 'tx_us', '.1f', 'us a transaction')}, "
              f"{spread(rs, 'send_us', '.1f', 'us a send')}, "
              f"{spread(rs, 'batch_us', '.2f', 'us a message of a batch of 256')}")


if __name__ == "__main__":
    main()
