"""Timer lateness with many pending timers: how late scheduled messages become consumable
while ``--pending`` other timers wait in the index.

Not part of the test run (pytest's testpaths is tests/). Run it by hand::

    python bench/bench_timers.py --pending 1000000 --dir /tmp/fmq-bench-timers

1. An embedded broker stores ``--pending`` TIMER records due a day from now (spread over an
   hour, so they interleave in the due-time table), in batches of 1000 per group commit,
   and waits until the index holds them all.
2. It then schedules ``--probes`` timers due at evenly spread times over the next
   ``--window`` seconds, one a request, each carrying its due time.
3. A reader pulls the probe topic every millisecond; a probe's *lateness* is the wall
   clock when the reader first sees it minus its due time (so it includes the timer
   service's poll interval, the group commit and the indexing, as a consumer sees them).

Prints the fill rate, the lateness p50 / p99 / max in ms and the pending count, as text
and (``--json``) one JSON object. Deletes the data directory unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import threading
import time

import fmq
from fmq.log.placement import now_ms

PROBE_TOPIC = "probe"


def fill(broker: fmq.Broker, pending: int, batch: int = 1000) -> float:
    """Store ``pending`` far-future timers; returns timers stored per second."""
    rng = random.Random(7)
    base = now_ms() + 86_400_000
    t0 = time.monotonic()
    done = 0
    while done < pending:
        n = min(batch, pending - done)
        msgs = [fmq.Message("far", b"x" * 16) for _ in range(n)]
        # one due time per request keeps place() simple; spread requests over an hour
        broker._timers.schedule(msgs, base + rng.randrange(3_600_000))
        done += n
    broker.wait_indexed(600)
    return pending / (time.monotonic() - t0)


def measure(broker: fmq.Broker, probes: int, window_s: float) -> list[int]:
    """Schedule the probes and return each one's lateness in ms."""
    seen: dict[int, int] = {}
    stop = threading.Event()

    def reader() -> None:
        offset = 0
        while not stop.is_set() and len(seen) < probes:
            for m in broker.reads.pull(PROBE_TOPIC, 0, offset, 256):
                seen[int(m.properties["due"])] = now_ms()
                offset = m.queue_offset + 1
            time.sleep(0.001)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    start = now_ms() + 500
    step = window_s * 1000 / probes
    dues = [int(start + i * step) for i in range(probes)]
    for due in dues:
        broker._timers.schedule([fmq.Message(PROBE_TOPIC, b"p", queue_id=0,
                                            properties={"due": str(due)})], due)
    thread.join(window_s + 60)
    stop.set()
    missing = [d for d in dues if d not in seen]
    if missing:
        raise SystemExit(f"{len(missing)} probes were never delivered")
    return [seen[d] - d for d in dues]


def percentile(values: list[int], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--probes", type=int, default=500)
    parser.add_argument("--window", type=float, default=10.0, help="seconds")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    path = args.dir or tempfile.mkdtemp(prefix="fmq-bench-timers-")
    shutil.rmtree(path, ignore_errors=True)
    config = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0)
    try:
        with fmq.Broker.open(path, config) as broker:
            rate = fill(broker, args.pending)
            pending = broker._timers.pending()
            late = measure(broker, args.probes, args.window)
        result = {"pending": pending, "fill_timers_per_s": round(rate),
                  "probes": len(late), "lateness_ms_p50": percentile(late, 50),
                  "lateness_ms_p99": percentile(late, 99), "lateness_ms_max": max(late),
                  "lateness_ms_mean": round(statistics.fmean(late), 1),
                  "timer_poll_ms": config.timer_poll_ms}
    finally:
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['pending']:,} pending timers (stored at {result['fill_timers_per_s']:,}"
              f"/s); {result['probes']} probes: lateness p50 {result['lateness_ms_p50']} ms, "
              f"p99 {result['lateness_ms_p99']} ms, max {result['lateness_ms_max']} ms "
              f"(timer_poll_ms {result['timer_poll_ms']})")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
