"""Storage-engine throughput, side by side in one process.

Run: ``python -m pytest bench/bench_storage.py --benchmark-enable -q`` (pytest-benchmark
tables), or ``python bench/bench_storage.py`` for the summary table used in notes.

Measures, with 1 KiB bodies and every acknowledged message fdatasync'd:
* durable sends/s with 1 and 32 threads (group commit), embedded;
* transactions/s with 1 and 10 messages each, 16 threads, next to plain sends;
* recovery replay throughput (MB of log per second) with the index deleted.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time

import fmq

BODY = b"x" * 1024
CFG = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0)


def _run_threads(threads: int, per_thread: int, fn) -> float:
    start = threading.Barrier(threads + 1)

    def worker(n):
        start.wait()
        for i in range(per_thread):
            fn(n, i)

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def sends_per_second(threads: int, total: int) -> float:
    d = tempfile.mkdtemp(prefix="fmq-bench-")
    try:
        with fmq.Broker.open(d, CFG) as b:
            b.send(fmq.Message("warm", BODY))
            secs = _run_threads(threads, total // threads,
                                lambda n, i: b.send(fmq.Message("bench", BODY)))
        return total / secs
    finally:
        shutil.rmtree(d)


def transactions_per_second(threads: int, total: int, messages: int) -> float:
    d = tempfile.mkdtemp(prefix="fmq-bench-")
    try:
        with fmq.Broker.open(d, CFG) as b:
            def one(n, i):
                tx = b.transactions.prepare([fmq.Message("bench", BODY)
                                             for _ in range(messages)], "g")
                b.transactions.commit(tx)
            secs = _run_threads(threads, total // threads, one)
        return total / secs
    finally:
        shutil.rmtree(d)


def replay_mb_per_second(megabytes: int) -> float:
    d = tempfile.mkdtemp(prefix="fmq-bench-")
    try:
        cfg = CFG.replace(flush_mode="async")
        with fmq.Broker.open(d, cfg) as b:
            n = megabytes * 1024 * 1024 // (len(BODY) + 90)
            batch = [fmq.Message("bench", BODY, key=f"k{i % 100}") for i in range(256)]
            for _ in range(n // 256):
                b.send_batch(batch)
        shutil.rmtree(os.path.join(d, "index"))
        os.unlink(os.path.join(d, "checkpoint"))
        t0 = time.perf_counter()
        with fmq.Broker.open(d, CFG) as b:
            replayed = b.recovery.bytes_replayed
        return replayed / (time.perf_counter() - t0) / 1e6
    finally:
        shutil.rmtree(d)


def median_of(fn, runs: int = 3) -> float:
    return statistics.median(fn() for _ in range(runs))


def main() -> None:
    rows = [
        ("durable sends/s, 1 thread", median_of(lambda: sends_per_second(1, 3000))),
        ("durable sends/s, 32 threads", median_of(lambda: sends_per_second(32, 32 * 400))),
        ("transactions/s, 1 msg, 16 threads",
         median_of(lambda: transactions_per_second(16, 16 * 100, 1))),
        ("transactions/s, 10 msgs, 16 threads",
         median_of(lambda: transactions_per_second(16, 16 * 40, 10))),
        ("plain sends/s, 16 threads", median_of(lambda: sends_per_second(16, 16 * 400))),
        ("recovery replay MB/s (200 MB, index deleted)", median_of(lambda: replay_mb_per_second(200), 1)),
    ]
    for name, value in rows:
        print(f"{name:<48} {value:>12,.0f}")


# ---------------------------------------------------------------- pytest-benchmark


def test_send_1_thread(benchmark):
    benchmark.pedantic(sends_per_second, args=(1, 1000), rounds=3)


def test_send_32_threads(benchmark):
    benchmark.pedantic(sends_per_second, args=(32, 32 * 100), rounds=3)


def test_tx_1_message_16_threads(benchmark):
    benchmark.pedantic(transactions_per_second, args=(16, 16 * 50, 1), rounds=3)


def test_tx_10_messages_16_threads(benchmark):
    benchmark.pedantic(transactions_per_second, args=(16, 16 * 20, 10), rounds=3)


def test_replay_50mb(benchmark):
    benchmark.pedantic(replay_mb_per_second, args=(50,), rounds=1)


if __name__ == "__main__":
    main()
