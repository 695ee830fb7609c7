"""Fail-over time and the cost of a 3-node group (issue 12), in one run:

1. **Fail-over**: a 3-node group (``sync``, ``min_insync = 1``, ``lease_ttl_s = 3``, the
   smallest the server takes) electing through a real etcd; a producer given all three
   addresses sends one message after the other; the primary is SIGKILLed, and the time
   from the kill to the first acknowledged write on the new primary is taken. The killed
   node is restarted (it rejoins as a follower) and the group is whole and in sync again
   before the next kill. Median and max over ``--kills``.
2. **Throughput**: durable sends/s over the network at 64 producers (``fmq bench produce``:
   fmq.loadgen, one SEND in flight per connection, 1 KiB bodies) against a single node,
   the primary of a 3-node etcd group in ``async`` mode, and in ``sync`` mode with
   ``min_insync = 1``. The set-ups take turns round by round (each started afresh), so
   drift on a shared machine hits them alike; each row is the median of the rounds.

Every server is a real ``fmq server`` subprocess on 127.0.0.1 with its own data directory
(flush_mode sync). The group is the test kit's (tests/replication/failover_kit.py).

Not part of the test run. Run from the repository root::

    python bench/bench_failover.py [--kills 10] [--rounds 3] [--seconds 5] [--producers 64]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, ROOT)

from bench_network import free_port, start_server  # noqa: E402 - the sibling script's helpers

from tests.replication.failover_kit import TTL_S, FailoverGroup  # noqa: E402

#: The group's settings for the throughput rows: the server's defaults but the lease.
GROUP = {"min_insync": 1, "server": {"lease_ttl_s": TTL_S}}
SETUPS = [
    ("single node", None),
    ("3 nodes, async", "async"),
    ("3 nodes, sync", "sync"),
]


def failover_times(root: str, kills: int) -> list[float]:
    """Seconds from each SIGKILL of the primary to the first write the new one acknowledged."""
    from fmq.client import Producer
    from fmq.client.connection import parse_servers
    from fmq.errors import FMQError

    where = os.path.join(root, "failover")
    os.makedirs(where)
    group = FailoverGroup(where).start()
    acks: list[tuple[float, tuple]] = []  # (when, the address that answered)
    stop = threading.Event()

    def produce() -> None:
        with Producer(group.servers, linger_ms=0, request_timeout=20, retries=10,
                      backoff_initial=0.01, backoff_max=0.1) as p:
            i = 0
            while not stop.is_set():
                try:
                    p.send("failover", f"m{i}".encode())
                    acks.append((time.monotonic(), p._conn.address))
                except FMQError:
                    pass
                i += 1

    times = []
    producer = threading.Thread(target=produce, daemon=True)
    try:
        group.wait_whole()
        producer.start()
        for k in range(kills):
            primary = group.wait_whole()
            time.sleep(1.0)  # the producer is writing to it
            killed_at = time.monotonic()
            primary.kill()
            address = parse_servers(primary.address)[0]
            deadline = killed_at + 60
            first = None
            while first is None and time.monotonic() < deadline:
                first = next((t for t, a in list(acks) if t > killed_at and a != address), None)
                time.sleep(0.01)
            if first is None:
                raise RuntimeError(f"no write acknowledged within 60 s of kill {k + 1}")
            times.append(first - killed_at)
            print(f"kill {k + 1}: first acknowledged write on the new primary after "
                  f"{times[-1]:.2f} s", flush=True)
            primary.start()
    finally:
        stop.set()
        producer.join(30)
        group.kill()
        shutil.rmtree(where, ignore_errors=True)
    return times


def run_setup(root: str, name: str, mode: str | None, producers: int, seconds: float) -> dict:
    from fmq.loadgen import BenchSpec, run_bench

    where = os.path.join(root, name.replace(" ", "").replace(",", "-"))
    shutil.rmtree(where, ignore_errors=True)
    os.makedirs(where)
    proc = group = None
    try:
        if mode is None:
            port = free_port()
            proc = start_server(os.path.join(where, "single"), port)
            address = f"127.0.0.1:{port}"
        else:
            group = FailoverGroup(where, config={**GROUP, "ack_mode": mode}).start()
            address = group.wait_whole().address
        report = run_bench(BenchSpec(kind="produce", server=address, producers=producers,
                                     size=1024, duration_s=seconds))
        return {"msgs_per_s": report.msgs_per_s, "p50_ms": report.p50_ms,
                "p99_ms": report.p99_ms, "errors": sum(report.errors.values())}
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
        if group is not None:
            group.kill()
        shutil.rmtree(where, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--producers", type=int, default=64)
    parser.add_argument("--data-dir", default=None, help="Where the servers' data goes.")
    args = parser.parse_args()
    root = args.data_dir or tempfile.mkdtemp(prefix="fmq-bench-failover-")
    times = failover_times(root, args.kills) if args.kills else []
    results: dict[str, list[dict]] = {name: [] for name, _ in SETUPS}
    for r in range(args.rounds):
        for name, mode in SETUPS:
            row = run_setup(root, name, mode, args.producers, args.seconds)
            results[name].append(row)
            print(f"round {r + 1} {name:16s} {row['msgs_per_s']:9,.0f} sends/s  "
                  f"p50 {row['p50_ms']:.2f} ms  p99 {row['p99_ms']:.2f} ms  "
                  f"errors {row['errors']}", flush=True)
    if times:
        print(f"\nfail-over (lease TTL {TTL_S} s), SIGKILL of the primary to the first "
              f"acknowledged write on the new one, {len(times)} kills: median "
              f"{statistics.median(times):.2f} s, max {max(times):.2f} s, "
              f"min {min(times):.2f} s")
    if not args.rounds:
        return
    base = statistics.median(r["msgs_per_s"] for r in results["single node"])
    print(f"\ndurable sends/s, {args.producers} producers, 1 KiB, median of {args.rounds} "
          f"rounds of {args.seconds:g} s:")
    print(f"{'set-up':16s} {'sends/s':>9s} {'vs single':>9s} {'p50 ms':>8s} {'p99 ms':>8s}")
    for name, _ in SETUPS:
        rows = results[name]
        rate = statistics.median(r["msgs_per_s"] for r in rows)
        print(f"{name:16s} {rate:9,.0f} {rate / base:9.2f} "
              f"{statistics.median(r['p50_ms'] for r in rows):8.2f} "
              f"{statistics.median(r['p99_ms'] for r in rows):8.2f}")


if __name__ == "__main__":
    main()
