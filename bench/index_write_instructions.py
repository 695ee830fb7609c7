"""Instructions per message of the index writers (callgrind), this checkout next to an older one.

Two paths, each run for ``--messages`` and for twice as many under ``valgrind
--tool=callgrind``; the difference divided by the extra messages is the cost per message
(imports, start-up and the index's creation cancel out):

* ``apply``: ``IndexStore.apply`` of queue entries already derived (what the dispatcher
  thread does with the hand-off's entries), in transactions of 256, four queues, 1 KiB
  messages without a key, eight messages per store time (messages placed together);
* ``scan``: ``index_flushed`` over a log of such messages (what the indexer process does for
  every flush, and the dispatcher's catch-up): the records read and decoded, then applied.

Each line also gives the LMDB puts per message (items written, by database) and how many
times the index writer lets the interpreter lock go per message: py-lmdb's ``putmulti``
releases it around each put, so in the broker every put is a chance for the index thread
and the event loop to trade the lock; the compiled batch writer (``_batch_puts_c``)
releases it once per transaction. In this checkout ``apply`` runs twice when the compiled
writer is chosen: with it, and with the reference ``putmulti`` (``apply, putmulti``), the
rest of the path unchanged. Not part of the test run::

    python bench/index_write_instructions.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--messages 8192]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.ab_rounds import HERE, parser, scratch, trees  # noqa: E402

WRITE = """
import sys, fmq
cfg = fmq.BrokerConfig(flush_mode="async", checkpoint_interval_ms=0, retention_interval_ms=0)
with fmq.Broker.open(sys.argv[1], cfg) as b:
    batch = [fmq.Message("bench", b"x" * 1024) for i in range(256)]
    for _ in range(int(sys.argv[2])):
        b.send_batch(batch)
"""

APPLY = """
import json, sys
from fmq.index import store as store_module
from fmq.index.entries import QueueEntry
from fmq.index.store import IndexStore
n, puts, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
writer = getattr(store_module, "PUT_BATCHES", None)  # None: a checkout from before it
if puts == "putmulti":
    from fmq.index import batch_puts
    store_module.PUT_BATCHES = writer = batch_puts.put_batches
direct = writer is not None and writer.__module__ == "fmq.index._batch_puts_c"
if direct:
    from fmq.index import _batch_puts_c
    direct = _batch_puts_c.direct()
print(json.dumps({"direct": direct}))
store = IndexStore(path, map_size=1 << 30)
entries = [QueueEntry("bench", i % 4, i // 4, 1040 * i, 1040, 0, 1_700_000_000_000 + i // 8,
                      None, 1040 * i) for i in range(n)]
for start in range(0, n, 256):
    store.apply(entries[start:start + 256], 1040 * (start + 256))
with store.env.begin() as txn:  # item counts without reading the items
    print(json.dumps({n: txn.stat(getattr(store.db, n))["entries"]
                      for n in ("cq", "time", "keys", "keyoff")}))
store.close()
"""

SCAN = """
import json, sys
from fmq.index.flushed_scan import index_flushed
from fmq.index.indexer_process import SegmentFiles
from fmq.index.store import IndexStore
log_dir, end, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
store = IndexStore(path, map_size=1 << 30)
segments = SegmentFiles(log_dir)
bases = segments.bases()
index_flushed(source=segments, start=bases[0], target=end, max_record_size=1 << 22,
              batch=256, segment_end=segments.segment_end, apply=store.apply)
with store.env.begin() as txn:  # item counts without reading the items
    print(json.dumps({n: txn.stat(getattr(store.db, n))["entries"]
                      for n in ("cq", "time", "keys", "keyoff")}))
store.close()
"""


def log_end(log_dir: str) -> int:
    """Where the valid records of the log in ``log_dir`` end (read outside the count)."""
    from fmq.log.scanner import LogScanner
    scanner = LogScanner(log_dir, copy_body=False)
    for _ in scanner:
        pass
    return scanner.end_offset


def instructions(tree: str, script: str, args: list[str], scratch_dir: str
                 ) -> tuple[dict, int]:
    """(items by database, instructions) of ``script`` run in ``tree`` under callgrind."""
    index = os.path.join(scratch_dir, "index")
    shutil.rmtree(index, ignore_errors=True)
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch_dir}/cg.out",
         sys.executable, "-c", script, *args, index],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=tree), cwd=tree,
        check=True)
    collected = re.search(r"Collected : (\d+)", out.stderr)
    if collected is None:
        raise SystemExit(f"callgrind printed no count:\n{out.stderr[-2000:]}")
    lines = [json.loads(line) for line in out.stdout.strip().splitlines()]
    found = lines[-1]
    for line in lines[:-1]:
        found.update(line)
    return found, int(collected.group(1))


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--messages", type=int, default=8192,
                    help="messages of the smaller run, a multiple of 256 (the larger has "
                         "twice as many)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    small, large = args.messages, 2 * args.messages
    direct: dict[str, bool] = {}  # per checkout: whether its apply ran the direct writer
    with scratch("fmq-index-instr-") as tmp:
        logs = {}
        for n in (small, large):
            logs[n] = os.path.join(tmp, f"log-{n}")
            subprocess.run([sys.executable, "-c", WRITE, logs[n], str(n // 256)],
                           check=True, cwd=HERE)
        for name, tree in trees(args.old).items():
            for path, script, argv in (
                    ("apply", APPLY, {n: [str(n), "chosen"] for n in (small, large)}),
                    ("apply, putmulti", APPLY, {n: [str(n), "putmulti"]
                                                for n in (small, large)}),
                    ("scan", SCAN, {n: [os.path.join(logs[n], "log"),
                                        str(log_end(os.path.join(logs[n], "log")))]
                                    for n in (small, large)})):
                if path == "apply, putmulti" and not direct.get(name):
                    continue  # the chosen writer was putmulti already
                (items_a, a), (items_b, b) = (instructions(tree, script, argv[n], tmp)
                                              for n in (small, large))
                if path == "apply":
                    direct[name] = items_b.get("direct", False)
                per = {db: (items_b[db] - items_a.get(db, 0)) / (large - small)
                       for db in items_b if db in ("cq", "time", "keys", "keyoff")}
                puts = " + ".join(f"{db} {v:.3f}" for db, v in per.items() if v)
                # The apply path writes 256 messages a transaction: the direct writer lets
                # the lock go once per transaction, putmulti once per item.
                releases = (f"; lock releases per message: "
                            f"{1 / 256 if items_b.get('direct') else sum(per.values()):.3f}"
                            if path != "scan" else "")
                print(f"{name} {path}: {(b - a) / (large - small):,.0f} instructions per "
                      f"message; LMDB items per message: {puts} = {sum(per.values()):.3f}"
                      f"{releases}")


if __name__ == "__main__":
    main()
