"""The server's memory over a long run at full load (performance target 6: "server RSS flat,
within 10 %, over 10 minutes at full load").

Starts an ``fmq server`` on a temporary directory (retention keeps the log near
``--retain-mb`` so the disk does not fill), runs 64 producers (one request in flight each)
while 16 consumers follow the topic, and samples the server's ``/proc/PID/status`` every
``--every`` seconds. It reports ``VmRSS`` and its two parts: ``RssAnon`` (the heap: what a
leak grows) and ``RssFile`` (mapped file pages, mostly LMDB's map, which the kernel may keep
or drop as it likes). "Flat" is judged after a warm-up (``--warmup``, default 60 s): the
largest sample afterwards against the first one, both for VmRSS and RssAnon.

Run (loads both cores for the whole duration)::

    python bench/bench_rss.py [--seconds 600] [--warmup 60] [--every 5] [--retain-mb 2048]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time

from bench_network import free_port, start_server

from fmq.loadgen import BenchSpec, run_bench

FIELDS = ("VmRSS", "RssAnon", "RssFile")


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in FIELDS:
                out[name] = int(rest.split()[0])
    return out


def growth(samples: list[tuple[float, dict[str, int]]], warmup: float, field: str) -> tuple:
    after = [m[field] for t, m in samples if t >= warmup]
    if not after:
        raise RuntimeError("no sample after the warm-up: run longer than --warmup")
    return after[0], max(after), after[-1], max(after) / after[0] - 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--warmup", type=float, default=60.0)
    ap.add_argument("--every", type=float, default=5.0)
    ap.add_argument("--producers", type=int, default=64)
    ap.add_argument("--consumers", type=int, default=16)
    ap.add_argument("--retain-mb", type=int, default=2048)
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="fmq-rss-")
    try:
        config = os.path.join(tmp, "config.json")
        with open(config, "w") as f:
            json.dump({"retention_bytes": args.retain_mb << 20, "retention_interval_ms": 10_000},
                      f)
        port = free_port()
        server = start_server(os.path.join(tmp, "data"), port, "--config", config)
        address = f"127.0.0.1:{port}"
        reports: dict = {}

        def consume() -> None:
            reports["consume"] = run_bench(BenchSpec(
                kind="consume", server=address, producers=args.consumers, follow=True,
                topic="rss", duration_s=args.seconds + 3))

        def produce() -> None:
            reports["produce"] = run_bench(BenchSpec(
                kind="produce", server=address, producers=args.producers, size=1024,
                duration_s=args.seconds, topic="rss"))

        try:
            consumers = threading.Thread(target=consume)
            consumers.start()
            time.sleep(2.0)  # the consumer processes start and connect
            producers = threading.Thread(target=produce)
            start = time.monotonic()
            producers.start()
            samples: list[tuple[float, dict[str, int]]] = []
            while producers.is_alive():
                samples.append((time.monotonic() - start, memory_kib(server.pid)))
                producers.join(args.every)
            consumers.join(args.seconds + 120)
        finally:
            server.terminate()
            server.wait(60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    p, c = reports.get("produce"), reports.get("consume")
    for name, r in (("producers", p), ("consumers", c)):
        if r is None or r.errors or r.count_check != "ok":
            raise SystemExit(f"the {name} failed: {r and (r.count_check, r.errors)}")
    print(f"{args.seconds:.0f} s, {args.producers} producers: {p.msgs_per_s:,.0f} sends/s "
          f"(p99 {p.p99_ms:.1f} ms); {args.consumers} consumers: {c.msgs_per_s:,.0f} msgs/s")
    print("| t (s) | " + " | ".join(f"{f} MiB" for f in FIELDS) + " |")
    print("|---:|" + "---:|" * len(FIELDS))
    step = max(1, len(samples) // 12)
    for t, m in samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else []):
        print(f"| {t:.0f} | " + " | ".join(f"{m[f] / 1024:.1f}" for f in FIELDS) + " |")
    for field in FIELDS:
        first, peak, last, grew = growth(samples, args.warmup, field)
        verdict = "flat (within 10 %)" if grew <= 0.10 else "GREW more than 10 %"
        print(f"{field}: {first / 1024:.1f} MiB at {args.warmup:.0f} s, peak {peak / 1024:.1f}, "
              f"last {last / 1024:.1f}: +{grew * 100:.1f} % -> {verdict}")


if __name__ == "__main__":
    main()
