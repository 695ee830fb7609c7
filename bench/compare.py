"""FMQ next to its peers, over alternating rounds: one table of medians, spreads and
FMQ/peer ratios (docs/performance.md says what each row means and records the results).

Rows 7 and 8 are FMQ's Kafka door driven by librdkafka (bench/kafka_load.py): a producer
beside FMQ's own batching (row 2's load), and a consumer group of 4 beside FMQ's consumers.

Peers: a private NATS JetStream for row 9 (bench/nats_peer.py: Debian's ``nats-server``, file
storage, which acknowledges before any fsync); a private Redis (``redis-server`` from Debian, ``appendonly yes``, ``appendfsync
always``, no RDB, 127.0.0.1, its own temporary directory, stopped by its PID) driven by
``redis-benchmark`` XADD with 1 KiB values; for the embedded rows, a minimal pure-Python
group-commit loop and the disk's fdatasync'd sequential write bandwidth. Without Redis the
Redis peers are left out (and said so) and the FMQ rows still run.

Each round runs every target's FMQ side and its peer back to back, FMQ first in odd rounds
and the peer first in even ones, so a slow phase of a shared machine hits both alike.

Run (loads the machine for a few minutes)::

    python bench/compare.py [--rounds 3] [--seconds 5] [--async-producer loadgen|sdk]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable

from bench_network import free_port, start_server
from embedded_peers import (
    broker_batch_mb_s,
    broker_sends,
    disk_mb_s,
    group_commit_loop,
    recovery,
)
from index_lag import IndexLagProbe
from kafka_load import consume_group, produce
from nats_peer import NatsPeer, nats_installed
from redis_peer import RedisPeer, redis_installed
from threads_profile import medians, per_message, print_threads, sample

from fmq.client import Producer
from fmq.loadgen import BenchSpec, run_bench
from fmq.loadgen.probe import ServerProbe
from fmq.loadgen.runner import default_processes

SIZE = 1024
CONNECTIONS = 64
BATCH_MESSAGES = 64  # 64 x (1 KiB + record header) > 64 KiB per send_batch call

Metrics = dict[str, float]


class Run:
    """What one round measures: the servers, the temporary directory, the counters."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="fmq-compare-")
        self.port = free_port()
        self.kafka_port = free_port()
        self.server = start_server(os.path.join(self.tmp, "server"), self.port,
                                   "--kafka-port", str(self.kafka_port))
        self.address = f"127.0.0.1:{self.port}"
        self.bootstrap = f"127.0.0.1:{self.kafka_port}"
        #: The last topic row 7 filled through the Kafka door, and how many it holds.
        self.kafka_filled: tuple[str, int] | None = None
        self.redis = RedisPeer(free_port()).start() if redis_installed() else None
        self.nats: NatsPeer | None = None  # started by row 9's first run
        self.n = 0
        self.redis_rate = 5000.0  # requests/s guess, refined after every Redis run
        #: Row 1's server figures per round, by thread (threads_profile.per_message).
        self.thread_rounds: list[dict] = []

    def topic(self) -> str:
        self.n += 1
        return f"cmp-{self.n}"

    def fmq_bench(self, **kw) -> dict:
        spec = BenchSpec(server=self.address, size=SIZE, duration_s=self.args.seconds,
                         topic=self.topic(), **kw)
        r = run_bench(spec)
        if r.count_check != "ok" or r.errors:
            raise RuntimeError(f"fmq bench failed: {r.count_check}, errors {r.errors}")
        return r.to_dict()

    def redis_xadd(self, clients: int, pipeline: int) -> dict:
        requests = max(2000, int(self.redis_rate * self.args.seconds))
        r = self.redis.xadd(f"s{self.topic()}", SIZE, requests, clients, pipeline)
        if not r["count_ok"]:
            raise RuntimeError(f"Redis stream grew by {r['stored']} after {r['requests']} "
                               f"XADDs")
        self.redis_rate = r["msgs_per_s"]
        return r

    def close(self) -> None:
        self.server.terminate()
        self.server.wait(60)
        if self.redis is not None:
            self.redis.stop()
        if self.nats is not None:
            self.nats.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _network(run: Run) -> Metrics:
    before = sample(run.server.pid)
    f = run.fmq_bench(kind="produce", producers=CONNECTIONS)
    # Around the whole run (connecting and the count check too): a little above the
    # measured window's "server CPU us/msg".
    split = per_message(before, sample(run.server.pid), f["messages"])
    run.thread_rounds.append(split)
    return {"msgs/s": f["msgs_per_s"], "p99 ms": f["p99_ms"],
            "server CPU us/msg": f["server_cpu_us_per_msg"],
            "server user us/msg": split["user_us"], "server system us/msg": split["system_us"]}


def _network_peer(run: Run) -> Metrics | None:
    if run.redis is None:
        return None
    r = run.redis_xadd(CONNECTIONS, 1)
    return {"msgs/s": r["msgs_per_s"], "p99 ms": r["p99_ms"],
            "server CPU us/msg": r["server_cpu_us_per_msg"]}


def _async_fmq(run: Run) -> Metrics:
    if run.args.async_producer == "sdk":
        return _async_sdk(run)
    f = run.fmq_bench(kind="produce", producers=CONNECTIONS, processes=1, batch_linger_ms=1,
                      batch=16)
    return {"msgs/s": f["msgs_per_s"], "p99 ms": f["p99_ms"],
            "server CPU us/msg": f["server_cpu_us_per_msg"]}


def _async_sdk(run: Run) -> Metrics:
    """The SDK's asynchronous producer (Producer.send_async), one process, one thread."""
    topic, sent, t0 = run.topic(), 0, time.perf_counter()
    end = t0 + run.args.seconds
    with Producer(run.address) as p:
        futures = []
        while time.perf_counter() < end:
            futures.append(p.send_async(topic, b"x" * SIZE))
            sent += 1
            if len(futures) >= 4096:
                for fut in futures:
                    fut.result()
                futures.clear()
        for fut in futures:
            fut.result()
    return {"msgs/s": sent / (time.perf_counter() - t0)}


def _async_peer(run: Run) -> Metrics | None:
    if run.redis is None:
        return None
    r = run.redis_xadd(CONNECTIONS, 16)
    return {"msgs/s": r["msgs_per_s"], "p99 ms": r["p99_ms"],
            "server CPU us/msg": r["server_cpu_us_per_msg"]}


def _embedded_fmq(run: Run) -> Metrics:
    s = run.args.seconds
    sends = broker_sends(os.path.join(run.tmp, f"e{run.topic()}"), CONNECTIONS, s)
    mb, _ = broker_batch_mb_s(os.path.join(run.tmp, f"e{run.topic()}"), BATCH_MESSAGES, s)
    return {"sends/s (64 threads)": sends, "send_batch MB/s": mb}


def _embedded_peer(run: Run) -> Metrics:
    s = run.args.seconds
    loop = group_commit_loop(os.path.join(run.tmp, "gc.log"), CONNECTIONS, s)
    per_call = BATCH_MESSAGES * (SIZE + 72 + 16)  # a record per message: header, topic
    disk = disk_mb_s(os.path.join(run.tmp, "disk.dat"), per_call, s)
    return {"sends/s (64 threads)": loop, "send_batch MB/s": disk}


def _tx_fmq(run: Run) -> Metrics:
    return {"msgs/s": run.fmq_bench(kind="tx", producers=CONNECTIONS)["msgs_per_s"]}


def _tx_with_next_fmq(run: Run) -> Metrics:
    """Row 4's load, each COMMIT written in one write with its producer's next PREPARE
    (``fmq bench tx --commit-with-next-prepare``)."""
    f = run.fmq_bench(kind="tx", producers=CONNECTIONS, commit_with_next=True)
    return {"msgs/s": f["msgs_per_s"], "server CPU us/msg": f["server_cpu_us_per_msg"]}


def _tx_peer(run: Run) -> Metrics:
    # Row 4 prints its msgs/s only (the table shows the FMQ side's metrics); row 4b, the
    # server's CPU per message too.
    f = run.fmq_bench(kind="produce", producers=CONNECTIONS)
    return {"msgs/s": f["msgs_per_s"], "server CPU us/msg": f["server_cpu_us_per_msg"]}


def _recovery_fmq(run: Run) -> Metrics:
    redo, reopen = recovery(os.path.join(run.tmp, f"r{run.topic()}"), run.args.recovery_mb)
    return {"redo MB/s (kill -9, no index)": redo, "reopen s (clean)": reopen}


def _recovery_peer(run: Run) -> Metrics | None:
    """Redis reloads its whole AOF on every start: after a kill -9 and after SIGTERM."""
    if run.redis is None:
        return None
    missing = run.args.recovery_mb * 1_000_000 - run.redis.aof_bytes()
    if missing > 0:  # about as much AOF as FMQ's log, written the fastest way
        run.redis.xadd("recovery-fill", SIZE, missing // (SIZE + 40), CONNECTIONS, 16)
    size = run.redis.aof_bytes()
    after_kill = run.redis.restart(kill=True)
    after_term = run.redis.restart(kill=False)
    return {"redo MB/s (kill -9, no index)": size / after_kill / 1e6,
            "reopen s (clean)": after_term}


CONSUMERS = 16


def _with_consumers(run: Run) -> Metrics:
    """64 producers while 16 consumers follow the topic at full speed."""
    topic = run.topic()
    consumers: dict = {}

    def consume() -> None:
        consumers["report"] = run_bench(BenchSpec(
            kind="consume", server=run.address, producers=CONSUMERS, follow=True,
            topic=topic, duration_s=run.args.seconds + 3))

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(2.0)  # the consumer processes start and connect
    metrics = _sends_and_lag(run, topic)
    t.join(run.args.seconds + 120)
    r = consumers.get("report")
    if r is None or r.count_check != "ok" or r.errors:
        raise RuntimeError(f"the consumers failed: {r and (r.count_check, r.errors)}")
    metrics["consumed msgs/s"] = r.msgs_per_s
    return metrics


def _without_consumers(run: Run) -> Metrics:
    return _sends_and_lag(run, run.topic())


def _sends_and_lag(run: Run, topic: str) -> Metrics:
    with IndexLagProbe(run.address) as probe:
        spec = BenchSpec(kind="produce", server=run.address, producers=CONNECTIONS,
                         size=SIZE, duration_s=run.args.seconds, topic=topic)
        r = run_bench(spec)
    if r.count_check != "ok" or r.errors:
        raise RuntimeError(f"fmq bench failed: {r.count_check}, errors {r.errors}")
    return {"send msgs/s": r.msgs_per_s, "index lag p99 ms": probe.p99_ms()}


KAFKA_GROUP = 4


def _kafka_produce(run: Run) -> Metrics:
    """One librdkafka producer (acks=all, librdkafka's own batching) through the Kafka
    door; the server's CPU per message from STATS around the run, as row 2's."""
    topic = run.topic()
    probe = ServerProbe(run.address)
    try:
        cpu_before = probe.process_cpu_s()
        r = produce(run.bootstrap, topic, run.args.seconds, SIZE)
        cpu_after = probe.process_cpu_s()
        if r["errors"] or not probe.wait_indexed() or probe.stored(topic) != r["delivered"]:
            raise RuntimeError(f"kafka produce: {r['delivered']} delivered, "
                               f"{probe.stored(topic)} stored, {r['errors']} errors "
                               f"({r['first_error']})")
    finally:
        probe.close()
    run.kafka_filled = (topic, r["delivered"])
    return {"msgs/s": r["msgs_per_s"], "p99 ms": r["p99_ms"],
            "server CPU us/msg": (cpu_after - cpu_before) / r["delivered"] * 1e6}


def _kafka_filled(run: Run) -> tuple[str, int]:
    if run.kafka_filled is None:  # row 8 without row 7: fill a topic first
        _kafka_produce(run)
    return run.kafka_filled


def _kafka_group(run: Run) -> Metrics:
    """A consumer group of KAFKA_GROUP librdkafka consumers reads row 7's topic whole."""
    topic, count = _kafka_filled(run)
    probe = ServerProbe(run.address)
    try:
        cpu_before = probe.process_cpu_s()
        r = consume_group(run.bootstrap, topic, f"g-{run.topic()}", KAFKA_GROUP, count)
        cpu_after = probe.process_cpu_s()
    finally:
        probe.close()
    return {"msgs/s": r["msgs_per_s"],
            "server CPU us/msg": (cpu_after - cpu_before) / count * 1e6}


def _fmq_group(run: Run) -> Metrics:
    """FMQ's own consumers (fmq bench consume, one per queue) read the same topic."""
    topic, _ = _kafka_filled(run)
    r = run_bench(BenchSpec(kind="consume", server=run.address, producers=KAFKA_GROUP,
                            topic=topic, duration_s=run.args.seconds + 30))
    if r.count_check != "ok" or r.errors:
        raise RuntimeError(f"fmq consume failed: {r.count_check}, errors {r.errors}")
    return {"msgs/s": r.msgs_per_s, "server CPU us/msg": r.server_cpu_us_per_msg}


def _network_fmq(run: Run) -> Metrics:
    """Row 1's load again, measured beside NATS in row 9."""
    f = run.fmq_bench(kind="produce", producers=CONNECTIONS)
    return {"msgs/s": f["msgs_per_s"], "p99 ms": f["p99_ms"],
            "server CPU us/msg": f["server_cpu_us_per_msg"]}


def _nats_peer(run: Run) -> Metrics | None:
    """NATS JetStream (file storage, no fsync before its acknowledgement) under row 1's
    load: 64 publishers over as many processes as fmq bench uses, one message in flight."""
    if not nats_installed():
        return None
    if run.nats is None:
        run.nats = NatsPeer(free_port()).start()
    r = run.nats.publish(SIZE, run.args.seconds, CONNECTIONS, default_processes())
    if not r["count_ok"]:
        raise RuntimeError(f"NATS stream grew by {r['stored']} after {r['acked']} "
                           f"acknowledged publishes ({r['errors']})")
    return {"msgs/s": r["msgs_per_s"], "p99 ms": r["p99_ms"],
            "server CPU us/msg": r["server_cpu_us_per_msg"]}


TARGETS: list[tuple[str, str, Callable, Callable | None]] = [
    ("1 network, 64 producers, 1 in flight", "Redis XADD -c 64", _network, _network_peer),
    ("2 async batching, 1 client process", "Redis XADD -P 16 -c 64", _async_fmq, _async_peer),
    ("3 embedded", "Python group commit / disk", _embedded_fmq, _embedded_peer),
    ("4 transactions of 1 message, 64 producers", "FMQ plain sends", _tx_fmq, _tx_peer),
    ("4b transactions of 1 message, commit sent with the next prepare, 64 producers",
     "FMQ plain sends", _tx_with_next_fmq, _tx_peer),
    ("5 recovery", "Redis AOF reload", _recovery_fmq, _recovery_peer),
    ("6 sends with 16 consumers following", "FMQ without consumers", _with_consumers,
     _without_consumers),
    ("7 Kafka door, librdkafka producer acks=all", "FMQ async batching (row 2)",
     _kafka_produce, _async_fmq),
    ("8 Kafka door, consumer group of 4", "fmq bench consume, 4 consumers", _kafka_group,
     _fmq_group),
    ("9 network, 64 producers, 1 in flight", "NATS JetStream 2.9, file store", _network_fmq,
     _nats_peer),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    ap.add_argument("--recovery-mb", type=int, default=100)
    ap.add_argument("--only", default="", help="comma-separated target numbers, e.g. 1,3 "
                                               "or 4,4b")
    ap.add_argument("--async-producer", choices=["loadgen", "sdk"], default="loadgen",
                    help="row 2's FMQ side: fmq bench --batch-linger, or the SDK's send_async")
    args = ap.parse_args()
    if args.async_producer == "sdk" and not hasattr(Producer, "send_async"):
        ap.error("this fmq has no Producer.send_async yet: use --async-producer loadgen")
    targets = [t for t in TARGETS if not args.only or t[0].split()[0] in args.only.split(",")]
    if not redis_installed():
        print("redis-server / redis-benchmark not installed (apt-get install redis-server "
              "redis-tools): the Redis peers are left out, the FMQ rows still run")
    if not nats_installed():
        print("nats-server not installed (apt-get install nats-server): row 9's peer is left "
              "out")
    results: dict[tuple[str, str], list[Metrics | None]] = {}
    run = Run(args)
    try:
        for rnd in range(args.rounds):
            for name, _, fmq_fn, peer_fn in targets:
                sides = [("fmq", fmq_fn), ("peer", peer_fn)]
                for side, fn in (sides if rnd % 2 == 0 else sides[::-1]):
                    value = fn(run) if fn is not None else None
                    results.setdefault((name, side), []).append(value)
            print(f"round {rnd + 1}/{args.rounds} done", flush=True)
    finally:
        run.close()
    print_table(targets, results, args)
    if run.thread_rounds:
        print(f"\nrow 1's server by thread, per message (median of {len(run.thread_rounds)} "
              f"rounds; bench/threads_profile.py measures a steady window and futex calls):\n")
        print_threads(medians(run.thread_rounds)["threads"])


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) >= 1 else f"{x:.3f}"


def _stat(values: list[float]) -> str:
    return f"{_num(statistics.median(values))} ({_num(min(values))}-{_num(max(values))})"


def print_table(targets: list, results: dict, args: argparse.Namespace) -> None:
    print(f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
          f"{os.cpu_count()} cores, {platform.python_version()}, {args.rounds} rounds of "
          f"{args.seconds:g} s, 1 KiB messages; median (min-max)\n")
    print("| target | metric | FMQ | peer | value | FMQ/peer |")
    print("|---|---|---:|---|---:|---:|")
    for name, peer_name, _, _ in targets:
        fmq_rounds = [m for m in results[(name, "fmq")] if m]
        peer_rounds = [m for m in results.get((name, "peer"), []) if m]
        for metric in fmq_rounds[0]:
            f = [m[metric] for m in fmq_rounds if m.get(metric) is not None]
            p = [m[metric] for m in peer_rounds if m.get(metric) is not None]
            ratio = f"{statistics.median(f) / statistics.median(p):.2f}" if f and p and \
                statistics.median(p) else "-"
            print(f"| {name} | {metric} | {_stat(f) if f else '-'} | {peer_name} | "
                  f"{_stat(p) if p else '-'} | {ratio} |")


if __name__ == "__main__":
    main()
