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

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_network import free_port  # noqa: E402
from bench.server_loop_ab import process_cpu_seconds  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(tree: str, data_dir: str, port: int) -> subprocess.Popen:
    """An ``fmq server`` running the code of ``tree``."""
    env = dict(os.environ, PYTHONPATH=tree)
    log = open(os.path.join(os.path.dirname(data_dir), "server.log"), "a")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "fmq.cli.main", "server", "--data-dir",
                             data_dir, "--port", str(port), "--log-level", "WARNING"],
                            stdout=log, stderr=log, env=env, cwd=tree)
    bench(port, "produce", 1, 0.5)  # waits for the port, warms the segment and caches
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
    scratch = tempfile.mkdtemp(prefix="fmq-tx-ab-")
    port = free_port()
    server = start_server(tree, os.path.join(scratch, "data"), port)
    try:
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
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", help="an older checkout to compare with (git worktree add)")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--producers", type=int, default=64)
    args = ap.parse_args()
    trees = {"new": HERE}
    if args.old:
        trees["old"] = os.path.abspath(args.old)
    names = list(trees)
    results: dict[str, list[dict]] = {name: [] for name in names}
    for n in range(args.rounds):
        for name in names if n % 2 == 0 else names[::-1]:
            r = one_round(trees[name], args.seconds, args.producers)
            results[name].append(r)
            print(f"round {n + 1} {name}: {r['tx_per_s']:7.0f} tx/s (p99 {r['tx_p99_ms']:.1f} "
                  f"ms), {r['sends_per_s']:7.0f} sends/s, ratio {r['ratio']:.2f}, server "
                  f"{r['cpu_us_per_tx']:.0f} us CPU/tx, {r['cpu_us_per_send']:.1f} us CPU/send",
                  flush=True)
    for name, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        spread = {k: (min(r[k] for r in rs), max(r[k] for r in rs)) for k in rs[0]}
        print(f"median {name}: {med['tx_per_s']:.0f} tx/s ({spread['tx_per_s'][0]:.0f}-"
              f"{spread['tx_per_s'][1]:.0f}), {med['sends_per_s']:.0f} sends/s "
              f"({spread['sends_per_s'][0]:.0f}-{spread['sends_per_s'][1]:.0f}), ratio "
              f"{med['ratio']:.2f} ({spread['ratio'][0]:.2f}-{spread['ratio'][1]:.2f}), "
              f"{med['cpu_us_per_tx']:.0f} us CPU/tx ({spread['cpu_us_per_tx'][0]:.0f}-"
              f"{spread['cpu_us_per_tx'][1]:.0f}), {med['cpu_us_per_send']:.1f} us CPU/send "
              f"({spread['cpu_us_per_send'][0]:.1f}-{spread['cpu_us_per_send'][1]:.1f})")


if __name__ == "__main__":
    main()
