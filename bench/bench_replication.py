"""Durable sends/s over the network at 64 producers: a single node, a primary in ``async``
mode with one follower, and a primary in ``sync`` mode (``min_insync = 1``) with one
follower, in one run (docs/replication.md, docs/performance.md); first, how fast an
empty follower catches up with a primary holding ``--catch-up-mb`` MB.

Every server is a real ``fmq server`` subprocess on 127.0.0.1 with its own data directory
(flush_mode sync: every acknowledgement follows an fdatasync on the primary, and in sync
mode one on the follower too). The load is ``fmq bench produce`` (fmq.loadgen): 64
connections, one SEND in flight each, 1 KiB bodies. The three set-ups take turns round by
round, so drift on a shared machine hits them alike; each row is the median of the rounds.

Not part of the test run. Run::

    python bench/bench_replication.py [--rounds 3] [--seconds 5] [--producers 64]
        [--catch-up-mb 50]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_network import free_port, start_server  # noqa: E402 - the sibling script's helpers

SETUPS = [
    ("single node", None),
    ("async, 1 follower", "async"),
    ("sync, 1 follower", "sync"),
]


def wait_in_sync(address: str) -> None:
    from fmq.client import Client
    from fmq.protocol import Op

    deadline = time.monotonic() + 30
    with Client(address) as c:
        while time.monotonic() < deadline:
            if json.loads(c.call(Op.REPL_STATUS, {})["json"])["in_sync"]:
                return
            time.sleep(0.05)
    raise RuntimeError("the follower did not get in sync")


def run_setup(root: str, name: str, mode: str | None, producers: int, seconds: float) -> dict:
    from fmq.loadgen import BenchSpec, run_bench

    where = os.path.join(root, name.replace(" ", "").replace(",", "-"))
    shutil.rmtree(where, ignore_errors=True)
    os.makedirs(where)
    port = free_port()
    procs = [start_server(os.path.join(where, "primary"), port,
                          *(["--ack-mode", mode] if mode else []))]
    try:
        if mode:
            procs.append(start_server(os.path.join(where, "follower"), free_port(),
                                      "--follow", f"127.0.0.1:{port}"))
            wait_in_sync(f"127.0.0.1:{port}")
        report = run_bench(BenchSpec(kind="produce", server=f"127.0.0.1:{port}",
                                     producers=producers, size=1024, duration_s=seconds))
        return {"msgs_per_s": report.msgs_per_s, "p50_ms": report.p50_ms,
                "p99_ms": report.p99_ms, "errors": sum(report.errors.values())}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(60)
        shutil.rmtree(where, ignore_errors=True)


def catch_up(root: str, megabytes: int) -> tuple[float, float]:
    """Fill a primary with ``megabytes`` MB of 1 KiB sends, start an empty follower and
    time its catch-up from the moment it serves: (MB/s, seconds)."""
    from fmq.client import Client, Producer
    from fmq.message import Message
    from fmq.protocol import Op

    where = os.path.join(root, "catch-up")
    shutil.rmtree(where, ignore_errors=True)
    os.makedirs(where)
    port = free_port()
    address = f"127.0.0.1:{port}"
    procs = [start_server(os.path.join(where, "primary"), port)]
    try:
        with Producer(address) as p:
            batch = [Message("catch-up", b"x" * 1024) for _ in range(1000)]
            for _ in range(megabytes):
                p.send_batch(batch)
        with Client(address) as c:
            end = json.loads(c.call(Op.REPL_STATUS, {})["json"])["durable_end"]
        follower_port = free_port()
        procs.append(start_server(os.path.join(where, "follower"), follower_port,
                                  "--follow", address))
        started = time.monotonic()  # it serves: the copy is starting
        with Client(f"127.0.0.1:{follower_port}") as c:
            while json.loads(c.call(Op.REPL_STATUS, {})["json"])["durable_end"] < end:
                time.sleep(0.02)
        seconds = time.monotonic() - started
        return end / seconds / 1e6, seconds
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(60)
        shutil.rmtree(where, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--producers", type=int, default=64)
    parser.add_argument("--catch-up-mb", type=int, default=50,
                        help="MB an empty follower copies in the catch-up measurement "
                             "(0: skip it).")
    parser.add_argument("--data-dir", default=None, help="Where the servers' data goes.")
    args = parser.parse_args()
    root = args.data_dir or tempfile.mkdtemp(prefix="fmq-bench-repl-")
    if args.catch_up_mb:
        rate, seconds = catch_up(root, args.catch_up_mb)
        print(f"catch-up: an empty follower copied {args.catch_up_mb} MB of 1 KiB sends in "
              f"{seconds:.1f} s ({rate:.1f} MB/s of log from the moment it served)", flush=True)
    results: dict[str, list[dict]] = {name: [] for name, _ in SETUPS}
    for r in range(args.rounds):
        for name, mode in SETUPS:
            row = run_setup(root, name, mode, args.producers, args.seconds)
            results[name].append(row)
            print(f"round {r + 1} {name:18s} {row['msgs_per_s']:9,.0f} sends/s  "
                  f"p50 {row['p50_ms']:.2f} ms  p99 {row['p99_ms']:.2f} ms  "
                  f"errors {row['errors']}", flush=True)
    base = statistics.median(r["msgs_per_s"] for r in results["single node"])
    print(f"\ndurable sends/s, {args.producers} producers, 1 KiB, median of {args.rounds} "
          f"rounds of {args.seconds:g} s:")
    print(f"{'set-up':18s} {'sends/s':>9s} {'vs single':>9s} {'p50 ms':>8s} {'p99 ms':>8s}")
    for name, _ in SETUPS:
        rows = results[name]
        rate = statistics.median(r["msgs_per_s"] for r in rows)
        print(f"{name:18s} {rate:9,.0f} {rate / base:9.2f} "
              f"{statistics.median(r['p50_ms'] for r in rows):8.2f} "
              f"{statistics.median(r['p99_ms'] for r in rows):8.2f}")


if __name__ == "__main__":
    main()
