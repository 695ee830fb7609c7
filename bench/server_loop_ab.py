"""The server on asyncio's event loop next to the same server on uvloop, in one run.

Each round starts one fresh ``fmq server`` per loop (the order alternates between rounds),
loads it with 64 raw producers (one SEND in flight each, 1 KiB bodies, acknowledged after
fdatasync) and reads the server process's CPU time from ``/proc`` around the measured window.
Prints per round and as medians: sends/s, p99 latency and server CPU microseconds per send,
which is steadier than sends/s on a shared machine. Not part of the test run. Run::

    python bench/server_loop_ab.py [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_network import free_port, measure, start_server  # noqa: E402

LOOPS = ("asyncio", "uvloop")


def process_cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(loop: str, seconds: float, producers: int) -> dict:
    scratch = tempfile.mkdtemp(prefix=f"fmq-loop-{loop}-")
    config = os.path.join(scratch, "fmq.json")
    with open(config, "w") as f:
        json.dump({"server": {"event_loop": loop}}, f)
    port = free_port()
    server = start_server(os.path.join(scratch, "data"), port, "--config", config)
    address = f"127.0.0.1:{port}"
    try:
        measure(address, producers, 1.0, raw=True)  # warm-up: connections, segment, caches
        before = process_cpu_seconds(server.pid)
        result = measure(address, producers, seconds, raw=True)
        result["server_us_per_send"] = 1e6 * (process_cpu_seconds(server.pid) - before) / \
            result["ops"]
        return result
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--producers", type=int, default=64)
    args = ap.parse_args()
    results: dict[str, list[dict]] = {loop: [] for loop in LOOPS}
    for n in range(args.rounds):
        for loop in LOOPS if n % 2 == 0 else LOOPS[::-1]:
            r = one_round(loop, args.seconds, args.producers)
            results[loop].append(r)
            print(f"round {n + 1} {loop:8} {r['ops_per_s']:8.0f} sends/s  p99 "
                  f"{r['p99_ms']:6.2f} ms  server CPU {r['server_us_per_send']:5.1f} us/send",
                  flush=True)
    med = {loop: {k: statistics.median(r[k] for r in rs)
                  for k in ("ops_per_s", "p99_ms", "server_us_per_send")}
           for loop, rs in results.items()}
    for loop, m in med.items():
        print(f"median   {loop:8} {m['ops_per_s']:8.0f} sends/s  p99 {m['p99_ms']:6.2f} ms  "
              f"server CPU {m['server_us_per_send']:5.1f} us/send")
    a, u = med["asyncio"], med["uvloop"]
    print(f"uvloop / asyncio: sends/s {u['ops_per_s'] / a['ops_per_s']:.2f}x, server CPU per "
          f"send {u['server_us_per_send'] / a['server_us_per_send']:.2f}x")


if __name__ == "__main__":
    main()
