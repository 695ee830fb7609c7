"""Transactions of one message next to plain sends, on this tree's server and (optionally)
on an older checkout's, alternating in one run.

Each round starts a fresh ``fmq server`` per tree (the order alternates between rounds),
runs ``fmq bench tx`` and ``fmq bench produce`` against it at the same concurrency (1 KiB
bodies, every acknowledgement after fdatasync) and reads the server's CPU time from
``/proc``. Prints per round and as medians: tx/s, sends/s, their ratio and the server's CPU
microseconds per transaction and per send. Not part of the test run. Run::

    python bench/bench_tx_ab.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.ab_rounds import (  # noqa: E402
    HERE,
    alternate,
    fmq_command,
    killed_at_end,
    parser,
    process_cpu_seconds,
    scratch,
    spread,
    trees,
)
from bench.bench_network import free_port  # noqa: E402


def start_server(tree: str, data_dir: str, port: int) -> subprocess.Popen:
    """An ``fmq server`` running the code of ``tree``."""
    env = dict(os.environ, PYTHONPATH=tree)
    log = open(os.path.join(os.path.dirname(data_dir), "server.log"), "a")  # noqa: SIM115
    proc = subprocess.Popen([*fmq_command(tree), "server", "--data-dir", data_dir, "--port",
                             str(port), "--log-level", "WARNING"],
                            stdout=log, stderr=log, env=env, cwd=tree)
    try:
        bench(port, "produce", 1, 0.5)  # waits for the port, warms the segment and caches
    except BaseException:
        proc.kill()  # a server that never answered is not left running
        proc.wait()
        raise
    return proc


def bench(port: int, kind: str, producers: int, seconds: float, retries: int = 60) -> dict:
    """One ``fmq bench`` run (this tree's load generator) as its JSON report."""
    cmd = [sys.executable, "-m", "fmq.cli.main", "bench", kind, "--server",
           f"127.0.0.1:{port}", "--producers", str(producers), "--duration", str(seconds),
           "--json"]
    for _ in range(retries):
        out = subprocess.run(cmd, capture_output=True, text=True, env=dict(
            os.environ, PYTHONPATH=HERE), cwd=HERE)
        if out.returncode == 0:
            return json.loads(out.stdout)
        if "connect" not in (out.stdout + out.stderr).lower():
            raise RuntimeError(f"fmq bench {kind} failed: {out.stdout}{out.stderr}")
        time.sleep(0.25)
    raise RuntimeError("the server did not start")


def one_round(tree: str, seconds: float, producers: int) -> dict:
    with scratch("fmq-tx-ab-") as d:
        port = free_port()
        with killed_at_end(start_server(tree, os.path.join(d, "data"), port)) as server:
            before = process_cpu_seconds(server.pid)
            tx = bench(port, "tx", producers, seconds)
            cpu = process_cpu_seconds(server.pid) - before
            before = process_cpu_seconds(server.pid)
            plain = bench(port, "produce", producers, seconds)
            send_cpu = process_cpu_seconds(server.pid) - before
    return {"tx_per_s": tx["msgs_per_s"], "tx_p99_ms": tx["p99_ms"],
            "sends_per_s": plain["msgs_per_s"],
            "ratio": tx["msgs_per_s"] / plain["msgs_per_s"],
            "cpu_us_per_tx": 1e6 * cpu / max(1, tx["messages"]),
            "cpu_us_per_send": 1e6 * send_cpu / max(1, plain["messages"])}


def show(name: str, r: dict) -> str:
    return (f"{name}: {r['tx_per_s']:7.0f} tx/s (p99 {r['tx_p99_ms']:.1f} ms), "
            f"{r['sends_per_s']:7.0f} sends/s, ratio {r['ratio']:.2f}, server "
            f"{r['cpu_us_per_tx']:.0f} us CPU/tx, {r['cpu_us_per_send']:.1f} us CPU/send")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--producers", type=int, default=64)
    args = ap.parse_args()
    paths = trees(args.old)
    results = alternate(list(paths), args.rounds,
                        lambda name: one_round(paths[name], args.seconds, args.producers), show)
    for name, rs in results.items():
        print(f"median {name}: {spread(rs, 'tx_per_s', '.0f', 'tx/s')}, "
              f"{spread(rs, 'sends_per_s', '.0f', 'sends/s')}, ratio {spread(rs, 'ratio', '.2f')}, "
              f"{spread(rs, 'cpu_us_per_tx', '.0f', 'us CPU/tx')}, "
              f"{spread(rs, 'cpu_us_per_send', '.1f', 'us CPU/send')}")


if __name__ == "__main__":
    main()
