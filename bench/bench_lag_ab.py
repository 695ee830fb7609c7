"""Target 6 (sends with 16 following consumers, index lag) on this tree's server and on an
older checkout's, alternating in one run.

Each round starts a fresh ``fmq server`` per tree (the order alternates between rounds) and
runs compare.py's row 6 against it: 64 producers with the index-lag probe, once alone and
once while 16 consumers follow the topic (``fmq bench consume --follow``). The load
generator, probe and consumers are this tree's, so only the server differs. Prints per
round and as medians (ranges): sends/s with and without consumers, their ratio, consumed
msgs/s, the lag p99 with and without consumers, the server's CPU microseconds per sent
message with consumers and without, and how many messages the consumers pulled per message
sent (each queue has four following consumers). Not part of the test run. Run::

    python bench/bench_lag_ab.py [--old PATH_OF_AN_OLDER_CHECKOUT] [--seconds 5] [--rounds 3]
        [--variant NAME='{"server": {"read_threads": 4}}' ...]

``--variant`` adds this tree's server with a configuration file of that JSON.
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
import threading
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "bench"))

from bench.bench_network import free_port  # noqa: E402
from bench.bench_tx_ab import bench  # noqa: E402
from bench.index_lag import IndexLagProbe  # noqa: E402
from bench.server_loop_ab import process_cpu_seconds  # noqa: E402
from fmq.loadgen import BenchSpec, run_bench  # noqa: E402

SIZE = 1024
PRODUCERS = 64
CONSUMERS = 16


def _sends(address: str, topic: str, seconds: float) -> tuple[float, float | None, int]:
    with IndexLagProbe(address) as probe:
        r = run_bench(BenchSpec(kind="produce", server=address, producers=PRODUCERS,
                                size=SIZE, duration_s=seconds, topic=topic))
    if r.count_check != "ok" or r.errors:
        raise RuntimeError(f"fmq bench failed: {r.count_check}, errors {r.errors}")
    return r.msgs_per_s, probe.p99_ms(), r.messages


def start_server(tree: str, scratch: str, port: int, config: dict | None) -> subprocess.Popen:
    """An ``fmq server`` running the code of ``tree`` (with ``config`` as its file)."""
    args = []
    if config is not None:
        path = os.path.join(scratch, "fmq.json")
        with open(path, "w") as f:
            json.dump(config, f)
        args = ["--config", path]
    log = open(os.path.join(scratch, "server.log"), "a")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "fmq.cli.main", "server", "--data-dir",
                             os.path.join(scratch, "data"), "--port", str(port),
                             "--log-level", "WARNING", *args],
                            stdout=log, stderr=log, env=dict(os.environ, PYTHONPATH=tree),
                            cwd=tree)
    bench(port, "produce", 1, 0.5)  # waits for the port, warms the segment and caches
    return proc


def one_round(tree: str, config: dict | None, seconds: float) -> dict:
    scratch = tempfile.mkdtemp(prefix="fmq-lag-ab-")
    port = free_port()
    server = start_server(tree, scratch, port, config)
    address = f"127.0.0.1:{port}"
    try:
        before = process_cpu_seconds(server.pid)
        alone, lag_alone, sent_alone = _sends(address, "alone", seconds)
        cpu_alone = process_cpu_seconds(server.pid) - before
        consumers: dict = {}

        def consume() -> None:
            consumers["report"] = run_bench(BenchSpec(
                kind="consume", server=address, producers=CONSUMERS, follow=True,
                topic="followed", duration_s=seconds + 3))

        t = threading.Thread(target=consume)
        t.start()
        time.sleep(2.0)  # the consumer processes start and connect
        before = process_cpu_seconds(server.pid)
        followed, lag_followed, sent = _sends(address, "followed", seconds)
        cpu = process_cpu_seconds(server.pid) - before
        t.join(seconds + 120)
        r = consumers.get("report")
        if r is None or r.count_check != "ok" or r.errors:
            raise RuntimeError(f"the consumers failed: {r and (r.count_check, r.errors)}")
        return {"sends_alone": alone, "sends_followed": followed, "ratio": followed / alone,
                "consumed": r.msgs_per_s, "lag_p99_followed": lag_followed or 0.0,
                "lag_p99_alone": lag_alone or 0.0, "cpu_us_per_send": 1e6 * cpu / max(1, sent),
                "cpu_us_per_send_alone": 1e6 * cpu_alone / max(1, sent_alone),
                "pulled_per_send": r.messages / max(1, sent)}
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(scratch, ignore_errors=True)


FIELDS = [("sends_alone", "sends/s alone", "{:.0f}"), ("sends_followed", "sends/s followed",
          "{:.0f}"), ("ratio", "ratio", "{:.2f}"), ("consumed", "consumed/s", "{:.0f}"),
          ("lag_p99_followed", "lag p99 followed ms", "{:.1f}"),
          ("lag_p99_alone", "lag p99 alone ms", "{:.1f}"),
          ("cpu_us_per_send", "server us CPU/send followed", "{:.1f}"),
          ("cpu_us_per_send_alone", "alone", "{:.1f}"),
          ("pulled_per_send", "messages pulled per send", "{:.2f}")]


def _line(r: dict) -> str:
    return ", ".join(f"{label} {fmt.format(r[k])}" for k, label, fmt in FIELDS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", help="an older checkout to compare with (git worktree add)")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=JSON: this tree's server with that configuration")
    args = ap.parse_args()
    trees: dict[str, tuple[str, dict | None]] = {"new": (HERE, None)}
    if args.old:
        trees["old"] = (os.path.abspath(args.old), None)
    for v in args.variant:
        name, config = v.split("=", 1)
        trees[name] = (HERE, json.loads(config))
    names = list(trees)
    results: dict[str, list[dict]] = {name: [] for name in names}
    for n in range(args.rounds):
        for name in names if n % 2 == 0 else names[::-1]:
            r = one_round(*trees[name], args.seconds)
            results[name].append(r)
            print(f"round {n + 1} {name}: {_line(r)}", flush=True)
    for name, rs in results.items():
        parts = []
        for k, label, fmt in FIELDS:
            vals = [r[k] for r in rs]
            parts.append(f"{label} {fmt.format(statistics.median(vals))} "
                         f"({fmt.format(min(vals))}-{fmt.format(max(vals))})")
        print(f"median {name}: " + ", ".join(parts))


if __name__ == "__main__":
    main()
