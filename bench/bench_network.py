"""End-to-end network benchmark: a real ``fmq server`` subprocess on 127.0.0.1, producers in
client processes, 1 KiB bodies, every acknowledgement after fdatasync (flush_mode sync).

Prints sends/s and p50/p99 acknowledgement latency with 1, 16 and 64 concurrent producers
then transactions/s (prepare + local transaction + commit, 1 and 16 concurrent producers).

Two kinds of client, each row once with each:

* ``sdk``: every producer is a thread with its own ``fmq.client.Producer`` (its own
  connection), spread over up to 4 client processes: what an application gets;
* ``raw``: every producer is an asyncio connection speaking the protocol directly (one
  request in flight each), in up to 2 processes: what the server sustains when the client
  costs little. On a small machine the client processes compete with the server for the
  same cores, so the difference between the two shows the SDK's own cost;
* ``embedded``: the same sends on an embedded ``fmq.Broker`` in one process (threads, no
  network), measured in the same run for comparison.

Not part of the test run (pytest's testpaths is tests/). Run::

    python bench/bench_network.py [--seconds 5] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BODY = b"x" * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(data_dir: str, port: int, *extra_args: str) -> subprocess.Popen:
    log = open(os.path.join(os.path.dirname(data_dir), "bench-server.log"), "a")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "fmq.cli.main", "server", "--data-dir",
                             data_dir, "--port", str(port), "--log-level", "WARNING",
                             *extra_args],
                            stdout=log, stderr=log)
    wait_answering(proc, port, "server")
    return proc


def wait_answering(proc: subprocess.Popen, port: int, what: str = "the server") -> None:
    """Return once the server ``proc`` answers a ping on 127.0.0.1:``port`` (within 30 s);
    else kill it and raise."""
    from fmq.client import Client
    from fmq.errors import FMQError

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with Client(f"127.0.0.1:{port}", retries=0, connect_timeout=0.5) as c:
                c.ping()
            return
        except FMQError:
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"{what} did not start")


def _worker(address: str, threads: int, seconds: float, mode: str, start_at: float,
            out: mp.Queue) -> None:
    import fmq
    from fmq.client import Producer, TransactionProducer

    lat: list[float] = []
    counts = [0]
    lock = threading.Lock()

    def run(i: int) -> None:
        if mode == "tx":
            p = TransactionProducer(address, f"bench-{os.getpid()}-{i}",
                                    lambda u: fmq.TxState.COMMIT, feedback=False)
        else:
            p = Producer(address)
        mine = []
        with p:
            p.ping()
            while time.time() < start_at:
                time.sleep(0.001)
            end = start_at + seconds
            msg = fmq.Message("bench", BODY)
            while True:
                t0 = time.perf_counter()
                if time.time() >= end:
                    break
                if mode == "tx":
                    r = p.send_in_transaction(msg, lambda tx, arg: fmq.TxState.COMMIT)
                    assert r.state == fmq.TxState.COMMIT
                else:
                    p.send("bench", BODY)
                mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)
            counts[0] += len(mine)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put(lat)


def _raw_worker(address: str, conns: int, seconds: float, mode: str, start_at: float,
                out: mp.Queue) -> None:
    """Producers as plain asyncio connections speaking the protocol (fmq.protocol), one
    request in flight each: what the server sustains without the SDK's thread hand-offs."""
    import asyncio

    from fmq.protocol import FrameDecoder, Op, decode_response, encode_request

    host, port = address.rsplit(":", 1)
    msg = {"topic": "bench", "body": BODY, "key": None, "tags": None, "properties": {},
           "queue_id": -1}

    async def one() -> list[float]:
        reader, writer = await asyncio.open_connection(host, int(port))
        dec = FrameDecoder()
        lat: list[float] = []
        rid = 0

        async def call(op: Op, fields: dict) -> dict:
            nonlocal rid
            rid += 1
            writer.write(encode_request(op, rid, fields))
            while True:
                frames = dec.feed(await reader.read(65536))
                if frames:
                    assert not frames[0].is_error, frames
                    return decode_response(frames[0])

        await asyncio.sleep(max(0.0, start_at - time.time()))
        end = start_at + seconds
        while time.time() < end:
            t0 = time.perf_counter()
            if mode == "tx":
                tx = (await call(Op.PREPARE, {"producer_group": "bench", "tx_id": None,
                                              "messages": [msg]}))["tx_id"]
                await call(Op.COMMIT, {"producer_group": "bench", "tx_id": tx})
            else:
                await call(Op.SEND, {"message": msg})
            lat.append(time.perf_counter() - t0)
        writer.close()
        return lat

    async def main() -> list[float]:
        res = await asyncio.gather(*(one() for _ in range(conns)))
        return [x for r in res for x in r]

    out.put(asyncio.run(main()))


def _embedded_worker(data_dir: str, threads: int, seconds: float, out: mp.Queue) -> None:
    """The same load on an embedded broker (no network), for comparison."""
    import fmq

    broker = fmq.Broker.open(data_dir)
    lat: list[float] = []
    lock = threading.Lock()
    end = time.time() + seconds

    def run() -> None:
        mine = []
        msg = fmq.Message("bench", BODY)
        while time.time() < end:
            t0 = time.perf_counter()
            broker.send(msg)
            mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    broker.close()
    out.put(lat)


def measure_embedded(data_dir: str, threads: int, seconds: float) -> dict:
    out: mp.Queue = mp.Queue()
    p = mp.Process(target=_embedded_worker, args=(data_dir, threads, seconds, out))
    p.start()
    lat = sorted(out.get(timeout=seconds + 120))
    p.join()
    q = statistics.quantiles(lat, n=100, method="inclusive")
    return {"producers": threads, "ops": len(lat), "ops_per_s": len(lat) / seconds,
            "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000}


def measure(address: str, producers: int, seconds: float, mode: str = "send",
            raw: bool = False) -> dict:
    procs = min(producers, 4)
    per = [producers // procs + (1 if i < producers % procs else 0) for i in range(procs)]
    out: mp.Queue = mp.Queue()
    start_at = time.time() + 1.0 + 0.02 * producers  # everyone connected before the clock
    procs = min(producers, 2) if raw else procs
    per = [producers // procs + (1 if i < producers % procs else 0) for i in range(procs)]
    target = _raw_worker if raw else _worker
    ps = [mp.Process(target=target, args=(address, n, seconds, mode, start_at, out))
          for n in per]
    for p in ps:
        p.start()
    lat: list[float] = []
    for _ in ps:
        lat.extend(out.get(timeout=seconds + 120))
    for p in ps:
        p.join()
    lat.sort()
    q = statistics.quantiles(lat, n=100, method="inclusive")
    return {"producers": producers, "ops": len(lat), "ops_per_s": len(lat) / seconds,
            "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--data-dir", default=None, help="default: a fresh temporary directory")
    ap.add_argument("--sdk-only", action="store_true",
                    help="skip the rows measured with the raw asyncio load generator")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="fmq-bench-")
    data_dir = args.data_dir or os.path.join(tmp, "data")
    port = free_port()
    server = start_server(data_dir, port)
    address = f"127.0.0.1:{port}"
    try:
        print(f"fmq network benchmark: 1 KiB bodies, flush_mode sync, {args.seconds:.0f} s per "
              f"row, server {address}, {os.cpu_count()} CPUs")
        print(f"{'client':<10}{'test':<14}{'producers':>10}{'ops':>10}{'ops/s':>10}"
              f"{'p50 ms':>9}{'p99 ms':>9}")
        rows = [("send", n) for n in (1, 16, 64)] + [("tx", 1), ("tx", 16)]
        for raw in (False, True):
            for mode, n in rows:
                r = measure(address, n, args.seconds, mode, raw)
                label = "sends" if mode == "send" else "transactions"
                print(f"{'raw' if raw else 'sdk':<10}{label:<14}{r['producers']:>10}"
                      f"{r['ops']:>10}{r['ops_per_s']:>10.0f}{r['p50_ms']:>9.2f}"
                      f"{r['p99_ms']:>9.2f}", flush=True)
            if args.sdk_only:
                break
        if not args.sdk_only:
            for n in (1, 16, 64):  # no network: what the broker itself does here, now
                r = measure_embedded(os.path.join(tmp, f"embedded-{n}"), n, args.seconds)
                print(f"{'embedded':<10}{'sends':<14}{r['producers']:>10}{r['ops']:>10}"
                      f"{r['ops_per_s']:>10.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}",
                      flush=True)
    finally:
        server.terminate()
        server.wait(60)
        if args.data_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
