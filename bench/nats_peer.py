"""A private NATS JetStream for bench/compare.py: ``nats-server`` from Debian with JetStream
and file storage in its own temporary directory, on 127.0.0.1, stopped by its PID; and a
lean publisher load in as many processes as ``fmq bench`` uses, each connection with one
message in flight, waiting for JetStream's publish acknowledgement before the next.

NATS 2.9 answers a JetStream publish once the message is in its file store's write buffer:
it does not fsync before the acknowledgement (2.10 added ``sync_interval: always``; Debian's
2.9 has no such setting), where FMQ answers only after fdatasync. The comparison is still the
one users make when they pick between the two.

The load speaks NATS's text protocol itself (``PUB subject reply size``, acknowledgements as
``MSG`` on a per-connection inbox), with the payload encoded once, as FMQ's load generator
pre-encodes its frames: neither side pays for a general client library.

Run alone (a quick look; compare.py is the measurement)::

    python bench/nats_peer.py --seconds 5 --clients 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from redis_peer import cpu_seconds

STREAM = "BENCH"


def nats_installed() -> bool:
    return bool(shutil.which("nats-server"))


class NatsPeer:
    """One nats-server with JetStream on ``port``; a stream ``BENCH`` over ``bench.>``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.dir = tempfile.mkdtemp(prefix="fmq-compare-nats-")
        self.proc: subprocess.Popen | None = None

    def start(self) -> NatsPeer:
        log = open(os.path.join(self.dir, "nats.log"), "w")  # noqa: SIM115 - child owns it
        self.proc = subprocess.Popen(
            ["nats-server", "-a", "127.0.0.1", "-p", str(self.port), "-js",
             "-sd", os.path.join(self.dir, "store")], stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                answer = self.request(f"$JS.API.STREAM.CREATE.{STREAM}", {
                    "name": STREAM, "subjects": ["bench.>"], "storage": "file",
                    "retention": "limits", "num_replicas": 1})
            except OSError:
                time.sleep(0.05)
                continue
            if "error" in answer:
                self.stop()
                raise RuntimeError(f"nats-server refused the stream: {answer['error']}")
            return self
        self.stop()
        raise RuntimeError(f"nats-server did not answer on port {self.port}")

    def request(self, subject: str, body: dict) -> dict:
        """One request-reply over a fresh connection (JetStream's API is requests)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            reader = s.makefile("rb")
            reader.readline()  # INFO
            payload = json.dumps(body).encode()
            s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"protocol":1}\r\n'
                      b"SUB _INBOX.setup 1\r\n"
                      + f"PUB {subject} _INBOX.setup {len(payload)}\r\n".encode()
                      + payload + b"\r\n")
            while True:
                line = reader.readline()
                if not line:
                    raise OSError("nats-server closed the connection")
                if line.startswith(b"PING"):
                    s.sendall(b"PONG\r\n")
                elif line.startswith(b"-ERR"):
                    raise RuntimeError(f"nats-server: {line.decode().strip()}")
                elif line.startswith(b"MSG "):
                    size = int(line.split()[-1])
                    data = reader.read(size + 2)
                    return json.loads(data[:size])

    def stored(self) -> int:
        return int(self.request(f"$JS.API.STREAM.INFO.{STREAM}", {})["state"]["messages"])

    def publish(self, size: int, seconds: float, clients: int, processes: int) -> dict:
        """``clients`` connections over ``processes`` load processes, each publishing one
        message at a time for ``seconds``: msgs/s, p99 (ms), server CPU per message (us),
        and whether the stream grew by exactly the acknowledged count."""
        before, cpu0 = self.stored(), cpu_seconds(self.proc.pid)
        start_at = time.time() + 1.0 + 0.2 * processes  # every process connected by then
        shares = [clients // processes + (i < clients % processes) for i in range(processes)]
        workers = [subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", "--port", str(self.port),
             "--clients", str(n), "--size", str(size), "--seconds", str(seconds),
             "--start-at", repr(start_at), "--prefix", f"p{i}"],
            stdout=subprocess.PIPE, text=True) for i, n in enumerate(shares) if n]
        reports = []
        for w in workers:
            out, _ = w.communicate(timeout=seconds + 120)
            if w.returncode != 0:
                raise RuntimeError(f"a NATS load process failed (exit {w.returncode})")
            reports.append(json.loads(out))
        cpu1 = cpu_seconds(self.proc.pid)
        acked = sum(r["acked"] for r in reports)
        in_window = sum(r["in_window"] for r in reports)
        latencies = sorted(x for r in reports for x in r["latencies_us"])
        grew = self.stored() - before
        errors = [e for r in reports for e in r["errors"]]
        return {"msgs_per_s": in_window / seconds,
                "p99_ms": latencies[int(0.99 * (len(latencies) - 1))] / 1000 if latencies
                else 0.0,
                "server_cpu_us_per_msg": (cpu1 - cpu0) / max(1, acked) * 1e6,
                "count_ok": grew == acked and not errors, "stored": grew, "acked": acked,
                "errors": errors[:3]}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------- one load process


class Publisher(asyncio.Protocol):
    """One connection: publish, wait for the acknowledgement on its inbox, publish again."""

    def __init__(self, name: str, payload: bytes, run: LoadRun) -> None:
        self.inbox = f"_INBOX.{name}"
        self.frame = (f"PUB bench.{name} {self.inbox}.a {len(payload)}\r\n".encode()
                      + payload + b"\r\n")
        self.run = run
        self.buffer = bytearray()
        self.sent_at = 0.0
        self.transport: asyncio.Transport | None = None
        self.ready = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(b'CONNECT {"verbose":false,"pedantic":false,"protocol":1}\r\n'  # type: ignore[attr-defined]
                        + f"SUB {self.inbox}.* 1\r\nPING\r\n".encode())

    def send(self) -> None:
        self.sent_at = time.perf_counter()
        self.transport.write(self.frame)

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        while True:
            end = buf.find(b"\r\n")
            if end < 0:
                return
            line = bytes(buf[:end])
            if line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                size = int(line.rsplit(b" ", 1)[1])
                if len(buf) < end + 2 + size + 2:
                    return
                body = bytes(buf[end + 2:end + 2 + size])
                del buf[:end + 2 + size + 2]
                self.acknowledged(line, body)
                continue
            del buf[:end + 2]
            if line == b"PING":
                self.transport.write(b"PONG\r\n")
            elif line == b"PONG" and not self.ready.done():
                self.ready.set_result(None)
            elif line.startswith(b"-ERR"):
                self.run.errors.append(line.decode())

    def acknowledged(self, line: bytes, body: bytes) -> None:
        now = time.perf_counter()
        if line.startswith(b"HMSG") or b'"seq"' not in body:
            self.run.errors.append(body.decode(errors="replace")[:200])
        else:
            self.run.acked += 1
            if self.run.start <= now < self.run.end:
                self.run.in_window += 1
                self.run.latencies_us.append(int((now - self.sent_at) * 1e6))
        if now < self.run.end and not self.run.errors:
            self.send()
        else:
            self.run.idle += 1
            if self.run.idle == self.run.clients:
                self.run.done.set_result(None)


class LoadRun:
    def __init__(self, clients: int, start_at: float, seconds: float) -> None:
        self.clients = clients
        self.acked = self.in_window = self.idle = 0
        self.latencies_us: list[int] = []
        self.errors: list[str] = []
        self.start = time.perf_counter() + (start_at - time.time())
        self.end = self.start + seconds
        self.done = asyncio.get_running_loop().create_future()


async def load(port: int, clients: int, size: int, seconds: float, start_at: float,
               prefix: str) -> dict:
    loop = asyncio.get_running_loop()
    run = LoadRun(clients, start_at, seconds)
    payload = os.urandom(size)
    publishers = []
    for i in range(clients):
        _, p = await loop.create_connection(
            lambda i=i: Publisher(f"{prefix}c{i}", payload, run), "127.0.0.1", port)
        publishers.append(p)
    await asyncio.wait_for(asyncio.gather(*(p.ready for p in publishers)), 30)
    await asyncio.sleep(max(0.0, run.start - time.perf_counter()))
    for p in publishers:
        p.send()
    await asyncio.wait_for(run.done, seconds + 60)
    for p in publishers:
        p.transport.close()
    return {"acked": run.acked, "in_window": run.in_window,
            "latencies_us": run.latencies_us, "errors": run.errors[:3]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--processes", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--prefix", default="p", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(asyncio.run(load(args.port, args.clients, args.size, args.seconds,
                                          args.start_at, args.prefix))))
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    peer = NatsPeer(port).start()
    try:
        r = peer.publish(args.size, args.seconds, args.clients, args.processes)
    finally:
        peer.stop()
    print(json.dumps({k: v for k, v in r.items()}, indent=1))


if __name__ == "__main__":
    main()
