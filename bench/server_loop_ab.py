"""The server on asyncio's event loop next to the same server on uvloop, in one run.

Each round starts one fresh ``fmq server`` per loop (the order alternates between rounds),
loads it with 64 raw producers (one SEND in flight each, 1 KiB bodies, acknowledged after
fdatasync) and reads the server process's CPU time from ``/proc`` around the measured window.
Prints per round and as medians: sends/s, p99 latency and server CPU microseconds per send,
which is steadier than sends/s on a shared machine. Not part of the test run. Run::

    python bench/server_loop_ab.py [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.ab_rounds import (  # noqa: E402
    alternate,
    killed_at_end,
    median,
    parser,
    process_cpu_seconds,
    scratch,
)
from bench.bench_network import free_port, measure, start_server  # noqa: E402

LOOPS = ("asyncio", "uvloop")


def one_round(loop: str, seconds: float, producers: int) -> dict:
    with scratch(f"fmq-loop-{loop}-") as d:
        config = os.path.join(d, "fmq.json")
        with open(config, "w") as f:
            json.dump({"server": {"event_loop": loop}}, f)
        port = free_port()
        address = f"127.0.0.1:{port}"
        with killed_at_end(start_server(os.path.join(d, "data"), port, "--config", config)
                           ) as server:
            measure(address, producers, 1.0, raw=True)  # warm-up: connections, segment, caches
            before = process_cpu_seconds(server.pid)
            result = measure(address, producers, seconds, raw=True)
            result["server_us_per_send"] = 1e6 * (process_cpu_seconds(server.pid) - before) / \
                result["ops"]
    return result


def show(loop: str, r: dict) -> str:
    return (f"{loop:8} {r['ops_per_s']:8.0f} sends/s  p99 {r['p99_ms']:6.2f} ms  server CPU "
            f"{r['server_us_per_send']:5.1f} us/send")


def main() -> None:
    ap = parser(__doc__, old=False)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--producers", type=int, default=64)
    args = ap.parse_args()
    results = alternate(LOOPS, args.rounds,
                        lambda loop: one_round(loop, args.seconds, args.producers), show)
    med = {loop: {k: median(rs, k) for k in ("ops_per_s", "p99_ms", "server_us_per_send")}
           for loop, rs in results.items()}
    for loop, m in med.items():
        print(f"median   {show(loop, m)}")
    a, u = med["asyncio"], med["uvloop"]
    print(f"uvloop / asyncio: sends/s {u['ops_per_s'] / a['ops_per_s']:.2f}x, server CPU per "
          f"send {u['server_us_per_send'] / a['server_us_per_send']:.2f}x")


if __name__ == "__main__":
    main()
