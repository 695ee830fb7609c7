"""Target 6's memory part: the server's resident set under compare.py's row-6 load (64
producers, 16 consumers following) for minutes on end. Samples VmRSS every ``--every``
seconds (and its anonymous part: the heap, without the index's mapped file pages) and
prints each sample, the first one after the warm-up, the last and the largest and their
ratios. The log is capped by retention (``--retention-mb``) so the run does not
fill the disk. Not part of the test run. Run::

    python bench/bench_rss_soak.py [--minutes 10] [--every 10] [--tree OLDER_CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from bench.bench_lag_ab import start_server  # noqa: E402
from bench.bench_network import free_port  # noqa: E402
from fmq.loadgen import BenchSpec, run_bench  # noqa: E402


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, RssAnon) in MB: the rest of the resident set is file pages, the LMDB index's
    map above all, which grows with the index until retention trims it."""
    found = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "RssAnon"):
                found[key] = int(line.split()[1]) / 1024
    return found.get("VmRSS", 0.0), found.get("RssAnon", 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=10.0)
    ap.add_argument("--warm-up", type=float, default=30.0, help="seconds before the base")
    ap.add_argument("--retention-mb", type=int, default=1024)
    ap.add_argument("--tree", default=HERE, help="the checkout whose server runs")
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="fmq-rss-soak-")
    port = free_port()
    config = {"retention_bytes": args.retention_mb << 20, "retention_interval_ms": 5000}
    server = start_server(os.path.abspath(args.tree), scratch, port, config)
    address = f"127.0.0.1:{port}"
    seconds = args.minutes * 60
    reports: dict = {}
    try:
        def load(kind: str, n: int, extra: float, follow: bool) -> None:
            reports[kind] = run_bench(BenchSpec(kind=kind, server=address, producers=n,
                                                size=1024, duration_s=seconds + extra,
                                                topic="soak", follow=follow))

        threads = [threading.Thread(target=load, args=("consume", 16, 5, True)),
                   threading.Thread(target=load, args=("produce", 64, 0, False))]
        threads[0].start()
        time.sleep(2)
        threads[1].start()
        t0 = time.monotonic()
        samples = []
        while any(t.is_alive() for t in threads):
            time.sleep(args.every)
            elapsed = time.monotonic() - t0
            if elapsed > seconds:
                break
            rss, anon = rss_mb(server.pid)
            samples.append((elapsed, rss, anon))
            print(f"{elapsed:6.0f} s  RSS {rss:7.1f} MB  anonymous {anon:7.1f} MB", flush=True)
        for t in threads:
            t.join(120)
        base = next((x for x in samples if x[0] >= args.warm_up), samples[0])
        peak = max(x[1] for x in samples)
        peak_anon = max(x[2] for x in samples)
        print(json.dumps({"base_mb": base[1], "last_mb": samples[-1][1], "peak_mb": peak,
                          "peak_over_base": peak / base[1], "anon_base_mb": base[2],
                          "anon_last_mb": samples[-1][2], "anon_peak_mb": peak_anon,
                          "anon_peak_over_base": peak_anon / base[2],
                          "sends_per_s": reports["produce"].msgs_per_s,
                          "consumed_per_s": reports["consume"].msgs_per_s}))
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
