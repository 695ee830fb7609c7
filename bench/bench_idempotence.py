"""What idempotence costs: durable sends/s with and without it, side by side.

A real ``fmq server`` subprocess on 127.0.0.1, default flush mode (every acknowledgement
after fdatasync), 1 KiB bodies, one client process. Two workloads:

* ``send_async``: N threads share one ``Producer`` and call ``send_async`` (client-side
  batches, the throughput path);
* ``send``: N threads share one ``Producer`` and call ``send`` (one durable round trip per
  message, pipelined on one connection).

Each workload runs ``--rounds`` times with ``idempotent=False`` and ``idempotent=True``
alternately on the same server (so both see the same disk and machine load); the report
gives the median msgs/s of each and their ratio. Every idempotent round is a new producer
id, as a restarted application would have.

Not part of the test run. Run (a few times at most on a shared machine)::

    python bench/bench_idempotence.py [--seconds 4] [--rounds 3] [--threads 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time

from bench_async_producer import BODY, run_threads
from bench_network import free_port, start_server


def run_sends(address: str, threads: int, seconds: float, idempotent: bool) -> float:
    """msgs/s of ``threads`` threads calling ``Producer.send`` for ``seconds``."""
    from fmq.client import Producer

    counts = [0] * threads
    with Producer(address, idempotent=idempotent) as p:
        p.send("bench", BODY)
        end = time.perf_counter() + seconds

        def produce(k: int) -> None:
            n = 0
            while time.perf_counter() < end:
                p.send("bench", BODY)
                n += 1
            counts[k] = n

        start = time.perf_counter()
        workers = [threading.Thread(target=produce, args=(k,)) for k in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - start
    return sum(counts) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4, help="send_async threads")
    parser.add_argument("--send-threads", type=int, default=16, help="send threads")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="bench-idem-")
    port = free_port()
    server = start_server(os.path.join(base, "data"), port)
    address = f"127.0.0.1:{port}"
    rates: dict[tuple[str, bool], list[float]] = {}
    try:
        for _ in range(args.rounds):
            for idempotent in (False, True):
                r = run_threads(address, args.threads, args.seconds, idempotent=idempotent)
                rates.setdefault(("send_async", idempotent), []).append(r["msgs_s"])
                rates.setdefault(("send", idempotent), []).append(
                    run_sends(address, args.send_threads, args.seconds, idempotent))
    finally:
        os.kill(server.pid, signal.SIGTERM)
        server.wait(30)
        shutil.rmtree(base, ignore_errors=True)
    print(f"durable sends/s, 1 KiB bodies, median of {args.rounds} rounds of "
          f"{args.seconds:g}s each, alternating")
    print(f"{'workload':<28} {'plain':>10} {'idempotent':>11} {'ratio':>7}")
    for workload, threads in (("send_async", args.threads), ("send", args.send_threads)):
        plain = statistics.median(rates[(workload, False)])
        idem = statistics.median(rates[(workload, True)])
        name = f"{workload} ({threads} threads)"
        print(f"{name:<28} {plain:>10,.0f} {idem:>11,.0f} {idem / plain:>7.2f}")
        print(f"  rounds plain {[round(x) for x in rates[(workload, False)]]}, "
              f"idempotent {[round(x) for x in rates[(workload, True)]]}")


if __name__ == "__main__":
    main()
