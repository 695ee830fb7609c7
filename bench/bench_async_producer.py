"""Batched asynchronous producing from one client process over the network, durable.

A real ``fmq server`` subprocess on 127.0.0.1 with the default flush mode (every
acknowledgement after fdatasync); this process is the one client:

* ``threads``: N threads share one ``fmq.client.Producer`` and call ``send_async``;
* ``asyncio``: one ``fmq.client.aio.AsyncProducer``, N tasks awaiting ``send_async``.

Bodies are 1 KiB. Prints msgs/s, MB/s (bodies) and p50/p99 of the acknowledgement latency
(``send_async`` called -> its future resolved, every 16th message sampled), and the
client process's CPU seconds per message.

When ``redis-server`` and ``redis-benchmark`` are installed, the same run also starts a
private ``redis-server`` (appendonly yes, appendfsync always, a temporary directory,
127.0.0.1, stopped by its PID) and runs ``redis-benchmark -P 16 -c 64`` with XADD of a
1 KiB field, then prints FMQ's rate divided by Redis's.

``--stub`` runs the same producers against a stub server instead (a process that answers
every SEND_BATCH at once and stores nothing): what the client alone sustains, to tell the
client's cost from the server's. Those rows are not durable and say so.

Not part of the test run. Run (a few times at most on a shared machine)::

    python bench/bench_async_producer.py [--seconds 5] [--threads 4] [--tasks 64] [--stub]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from bench_network import free_port, start_server

BODY = b"x" * 1024
SAMPLE = 16  # every 16th message's latency is recorded


def serve_stub(port: int) -> None:
    """The stub server: PING answers the default limits, SEND_BATCH gets zeroed results
    for its count of messages without decoding them. Nothing is stored."""
    import struct

    from fmq.protocol import FrameDecoder, Op, encode_response

    async def session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(1 << 18):
            for frame in decoder.feed(data):
                if frame.opcode == Op.PING:
                    writer.write(encode_response(Op.PING, frame.request_id, {
                        "server_version": "stub", "protocol_version": 1,
                        "queues_per_topic": 4, "max_frame_size": 64 << 20,
                        "max_in_flight": 256}))
                    continue
                count = struct.unpack_from(">I", frame.payload, 0)[0] if (
                    frame.opcode == Op.SEND_BATCH) else 1
                body = struct.pack(">I", count) + bytes(20 * count) if (
                    frame.opcode == Op.SEND_BATCH) else bytes(20)
                writer.write(struct.pack(">IBBHQ", 12 + len(body), 1, frame.opcode, 1,
                                         frame.request_id) + body)
            await writer.drain()

    async def main() -> None:
        server = await asyncio.start_server(session, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def start_stub(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, __file__, "--serve-stub", str(port)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("stub server did not start")


class Meter:
    """Counts acknowledgements and samples their latency."""

    def __init__(self) -> None:
        self.lat: list[float] = []

    def summary(self, count: int, seconds: float, cpu: float) -> dict:
        lat = sorted(self.lat)
        return {"msgs": count, "msgs_s": count / seconds,
                "mb_s": count * len(BODY) / seconds / 1e6,
                "p50_ms": 1000 * statistics.median(lat) if lat else float("nan"),
                "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))] if lat else float("nan"),
                "cpu_us_per_msg": 1e6 * cpu / max(1, count)}


def run_threads(address: str, threads: int, seconds: float, **opts) -> dict:
    from fmq.client import Producer

    meter = Meter()
    counts = [0] * threads
    with Producer(address, **opts) as p:
        p.send("bench", BODY)  # connect and warm up
        start = time.perf_counter()
        end = start + seconds
        cpu0 = time.process_time()

        def produce(k: int) -> None:
            n = 0
            lat = meter.lat
            perf = time.perf_counter
            send = p.send_async
            while True:
                for _ in range(SAMPLE - 1):
                    send("bench", BODY)
                t0 = perf()
                send("bench", BODY).add_done_callback(lambda _f, t0=t0: lat.append(perf() - t0))
                n += SAMPLE
                if t0 >= end:
                    break
            counts[k] = n

        workers = [threading.Thread(target=produce, args=(k,)) for k in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        p.flush()
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu0
    return meter.summary(sum(counts), elapsed, cpu)


def run_asyncio(address: str, tasks: int, seconds: float, **opts) -> dict:
    from fmq.client.aio import AsyncProducer

    meter = Meter()

    async def main() -> dict:
        async with AsyncProducer(address, **opts) as p:
            await p.send("bench", BODY)
            start = time.perf_counter()
            end = start + seconds
            cpu0 = time.process_time()
            perf = time.perf_counter
            lat = meter.lat

            async def produce() -> int:
                n = 0
                send = p.send_async
                while True:
                    for _ in range(SAMPLE - 1):
                        await send("bench", BODY)
                    t0 = perf()
                    (await send("bench", BODY)).add_done_callback(
                        lambda _f, t0=t0: lat.append(perf() - t0))
                    n += SAMPLE
                    if t0 >= end:
                        return n

            counts = await asyncio.gather(*(produce() for _ in range(tasks)))
            await p.flush()
            return meter.summary(sum(counts), perf() - start, time.process_time() - cpu0)

    return asyncio.run(main())


def run_redis(requests: int) -> dict | None:
    server, bench = shutil.which("redis-server"), shutil.which("redis-benchmark")
    if not server or not bench:
        return None
    tmp = tempfile.mkdtemp(prefix="bench-redis-")
    port = free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
                             "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                             "--daemonize", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        out = subprocess.run([bench, "-h", "127.0.0.1", "-p", str(port), "-P", "16", "-c", "64",
                              "-n", str(requests), "--csv", "XADD", "bench", "*", "f",
                              BODY.decode()], capture_output=True, text=True, timeout=600,
                             check=True).stdout
        row = list(csv.DictReader(io.StringIO(out)))[-1]
        return {"msgs_s": float(row["rps"]), "p50_ms": float(row["p50_latency_ms"]),
                "p99_ms": float(row["p99_latency_ms"])}
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=1, help="producer threads (threads mode)")
    ap.add_argument("--tasks", type=int, default=64, help="producer tasks (asyncio mode)")
    ap.add_argument("--mode", choices=["threads", "asyncio", "both"], default="both")
    ap.add_argument("--linger-ms", type=float, default=5)
    ap.add_argument("--batch-size", type=int, default=64 * 1024)
    ap.add_argument("--buffer-mb", type=float, default=32, help="producer buffer_memory, MiB")
    ap.add_argument("--redis-requests", type=int, default=200_000)
    ap.add_argument("--data-dir", help="where the server's data goes (default: a temp dir)")
    ap.add_argument("--stub", action="store_true",
                    help="a stub server that stores nothing: the client's own ceiling")
    ap.add_argument("--serve-stub", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_stub:
        serve_stub(args.serve_stub)
        return

    base = args.data_dir or tempfile.mkdtemp(prefix="bench-async-")
    port = free_port()
    server = start_stub(port) if args.stub else start_server(os.path.join(base, "data"), port)
    kind = "stub (NOT durable)" if args.stub else "fmq"
    address = f"127.0.0.1:{port}"
    opts = {"linger_ms": args.linger_ms, "batch_size": args.batch_size,
            "buffer_memory": int(args.buffer_mb * 1024 * 1024)}
    rows = []
    try:
        if args.mode in ("threads", "both"):
            rows.append((f"{kind} threads={args.threads}",
                         run_threads(address, args.threads, args.seconds, **opts)))
        if args.mode in ("asyncio", "both"):
            rows.append((f"{kind} asyncio tasks={args.tasks}",
                         run_asyncio(address, args.tasks, args.seconds, **opts)))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        if not args.data_dir:
            shutil.rmtree(base, ignore_errors=True)

    print(f"1 KiB bodies, {'a stub server: nothing stored' if args.stub else 'durable (fdatasync before every ack)'}, "
          f"{os.cpu_count()} cores")
    for name, r in rows:
        print(f"{name:38s} {r['msgs_s']:9.0f} msgs/s {r['mb_s']:7.1f} MB/s  "
              f"ack p50 {r['p50_ms']:6.1f} ms p99 {r['p99_ms']:6.1f} ms  "
              f"client {r['cpu_us_per_msg']:.1f} us CPU/msg")
    if args.stub:
        return
    redis = run_redis(args.redis_requests)
    if redis is None:
        print("redis-benchmark not installed: no comparison "
              "(apt-get install redis-server redis-tools)")
        return
    print(f"{'redis XADD -P 16 -c 64':38s} {redis['msgs_s']:9.0f} msgs/s "
          f"{redis['msgs_s'] * len(BODY) / 1e6:7.1f} MB/s  ack p50 {redis['p50_ms']:6.1f} ms "
          f"p99 {redis['p99_ms']:6.1f} ms  (appendfsync always)")
    best = max(r["msgs_s"] for _n, r in rows)
    print(f"ratio fmq best / redis: {best / redis['msgs_s']:.2f}")


if __name__ == "__main__":
    main()
