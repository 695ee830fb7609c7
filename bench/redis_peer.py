"""A private Redis for bench/compare.py: ``redis-server`` from Debian with ``appendonly yes``
and ``appendfsync always`` (every write fsync'd before the answer, as FMQ's sync flush), no
RDB snapshots, on 127.0.0.1, in its own temporary directory, stopped by its PID; and
``redis-benchmark`` runs of XADD with 1 KiB values against it."""

from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import subprocess
import tempfile
import time


def redis_installed() -> bool:
    return bool(shutil.which("redis-server") and shutil.which("redis-benchmark"))


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RedisPeer:
    def __init__(self, port: int) -> None:
        self.port = port
        self.dir = tempfile.mkdtemp(prefix="fmq-compare-redis-")
        self.proc: subprocess.Popen | None = None

    def start(self) -> RedisPeer:
        log = open(os.path.join(self.dir, "redis.log"), "w")  # noqa: SIM115 - child owns it
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--appendonly", "yes", "--appendfsync", "always", "--save", "",
             "--daemonize", "no", "--protected-mode", "yes"],
            stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.cli("PING") == "PONG":
                return self
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def cli(self, *args: str) -> str:
        r = subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True,
                           text=True, timeout=30, check=False)
        return r.stdout.strip()

    def xlen(self, stream: str) -> int:
        return int(self.cli("XLEN", stream) or 0)

    def xadd(self, stream: str, size: int, requests: int, clients: int, pipeline: int
             ) -> dict:
        """One redis-benchmark run of XADD: rps, p50/p99 (ms), server CPU per message (us),
        and whether the stream grew by the number of requests."""
        # redis-benchmark sends whole pipelines: a count it can split evenly is sent exactly.
        requests = -(-requests // (clients * pipeline)) * clients * pipeline
        before_len, cpu0 = self.xlen(stream), cpu_seconds(self.proc.pid)
        t0 = time.perf_counter()
        out = subprocess.run(
            ["redis-benchmark", "-p", str(self.port), "-c", str(clients), "-n", str(requests),
             "-P", str(pipeline), "--csv", "XADD", stream, "*", "f", "x" * size],
            capture_output=True, text=True, timeout=600, check=True).stdout
        elapsed = time.perf_counter() - t0
        cpu1 = cpu_seconds(self.proc.pid)
        row = list(csv.DictReader(io.StringIO(out)))[-1]
        grew = self.xlen(stream) - before_len
        return {"msgs_per_s": float(row["rps"]), "p50_ms": float(row["p50_latency_ms"]),
                "p99_ms": float(row["p99_latency_ms"]), "seconds": elapsed,
                "server_cpu_us_per_msg": (cpu1 - cpu0) / requests * 1e6,
                "count_ok": grew == requests, "stored": grew, "requests": requests}

    def _end(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def aof_bytes(self) -> int:
        total = 0
        for dirpath, _, files in os.walk(self.dir):
            total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files
                         if ".aof" in f)
        return total

    def restart(self, kill: bool) -> float:
        """Stop Redis (SIGKILL when ``kill``, else SIGTERM) and start it on the same
        directory; the seconds until it answers PING again (its whole AOF loaded)."""
        self._end(signal.SIGKILL if kill else signal.SIGTERM)
        t0 = time.perf_counter()
        self.start()
        return time.perf_counter() - t0

    def stop(self) -> None:
        self._end(signal.SIGTERM)
        shutil.rmtree(self.dir, ignore_errors=True)
