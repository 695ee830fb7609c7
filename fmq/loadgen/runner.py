"""A whole benchmark run: split the connections over processes, start them together, merge
what they measured, read the server's CPU time around the run, and check that the broker
holds as many messages as the run says it stored (or, for consumers, that every message of
the queues they read arrived once, in order)."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
from dataclasses import dataclass

from fmq.client.auth import Credentials
from fmq.client.connection import parse_servers
from fmq.client.tls import TLSOptions
from fmq.errors import FMQError, InvalidArgument
from fmq.loadgen.histogram import Histogram
from fmq.loadgen.probe import ServerProbe
from fmq.loadgen.report import BenchReport
from fmq.loadgen.worker import WorkerJob, run_worker, uvloop

KINDS = ("produce", "consume", "tx")
READY_TIMEOUT_S = 60.0
FOLLOW_END = (1 << 64) - 1  # a following consumer's queues have no end


class BenchFailed(FMQError):
    """A load process could not run (it could not connect, or it crashed)."""


def default_processes() -> int:
    return max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class BenchSpec:
    kind: str
    server: str
    producers: int = 16
    size: int = 1024
    duration_s: float = 10.0
    pipeline: int = 1
    batch_linger_ms: float = 0.0
    batch: int = 16
    processes: int = 0  # 0: default_processes()
    topic: str = "fmq-bench"
    loop: str = "auto"  # auto, asyncio or uvloop
    follow: bool = False  # consume: read what arrives during the run, not what is stored
    tls: TLSOptions | None = None  # a secured server: TLS and the user to log in as
    credentials: Credentials | None = None
    #: tx: each transaction's COMMIT written in one write with the lane's next PREPARE.
    commit_with_next: bool = False

    def check(self) -> None:
        need = [
            (self.kind in KINDS, f"unknown benchmark {self.kind!r}: use one of {KINDS}"),
            (self.producers >= 1, "--producers must be at least 1"),
            (0 <= self.size <= 64 * 1024 * 1024, "--size must be in 0..67108864 bytes"),
            (self.duration_s > 0, "--duration must be more than 0 seconds"),
            (self.pipeline >= 1, "--pipeline must be at least 1"),
            (self.batch_linger_ms >= 0, "--batch-linger must be 0 or more milliseconds"),
            (1 <= self.batch <= 10_000, "--batch must be in 1..10000 messages"),
            (self.processes >= 0, "--processes must be 0 (automatic) or more"),
            (self.loop in ("auto", "asyncio", "uvloop"), "--loop must be auto, asyncio or uvloop"),
            (self.loop != "uvloop" or uvloop is not None,
             "uvloop is not installed: pip install 'fmq[bench]', or use --loop asyncio"),
            (not self.commit_with_next or self.kind == "tx",
             "--commit-with-next-prepare applies to `fmq bench tx` only"),
        ]
        for ok, text in need:
            if not ok:
                raise InvalidArgument(text)
        parse_servers(self.server)

    @property
    def batching(self) -> bool:
        return self.kind == "produce" and self.batch_linger_ms > 0

    @property
    def uses_uvloop(self) -> bool:
        return self.loop == "uvloop" or (self.loop == "auto" and uvloop is not None)


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _jobs(spec: BenchSpec, probe: ServerProbe) -> list[WorkerJob]:
    host, port = parse_servers(probe.primary)[0]
    procs = min(spec.producers, spec.processes or default_processes())
    cursors: list[tuple] = [() for _ in range(spec.producers)]
    if spec.kind == "consume" and spec.follow:
        # Every consumer follows at least one queue; with more consumers than queues they
        # share queues, each reading all of its queue (as members of different groups).
        queues = probe.queues_per_topic
        cursors = [tuple((spec.topic, q, hi, FOLLOW_END)
                         for q, _, hi in probe.ranges(spec.topic) if q % spec.producers == i
                         or q == i % queues)
                   for i in range(spec.producers)]
    elif spec.kind == "consume":
        ranges = [(spec.topic, q, lo, hi) for q, lo, hi in probe.ranges(spec.topic) if hi > lo]
        if not ranges:
            raise InvalidArgument(f"topic {spec.topic!r} holds no messages to consume: run "
                                  f"`fmq bench produce --topic {spec.topic}` first")
        lanes: list[list] = [[] for _ in range(spec.producers)]
        for i, r in enumerate(ranges):
            lanes[i % spec.producers].append(r)
        cursors = [tuple(lane) for lane in lanes]
    jobs, at = [], 0
    for n in _split(spec.producers, procs):
        jobs.append(WorkerJob(host, port, spec.kind, n, spec.pipeline, spec.topic, spec.size,
                              spec.batch if spec.batching else 1, spec.duration_s,
                              spec.uses_uvloop, cursors=tuple(cursors[at:at + n]),
                              follow=spec.follow, tls=spec.tls,
                              credentials=spec.credentials,
                              commit_with_next=spec.commit_with_next))
        at += n
    return jobs


def _collect(results: mp.Queue, count: int, timeout: float) -> list[dict]:
    out = []
    for _ in range(count):
        try:
            out.append(results.get(timeout=timeout))
        except queue.Empty:
            raise BenchFailed(f"a load process gave no result within {timeout:.0f}s; the "
                              f"server may be stuck (see `fmq stats`)") from None
    failed = [r for r in out if "failure" in r]
    if failed:
        raise BenchFailed(f"a load process failed: {failed[0]['failure']}; check --server "
                          f"and that the server is running")
    return out


def run_bench(spec: BenchSpec) -> BenchReport:
    """Run one benchmark against a running server and return its report."""
    spec.check()
    probe = ServerProbe(spec.server, spec.tls, spec.credentials)
    try:
        return _run(spec, probe)
    finally:
        probe.close()


def _run(spec: BenchSpec, probe: ServerProbe) -> BenchReport:
    jobs = _jobs(spec, probe)
    stored_before = probe.stored(spec.topic) if spec.kind != "consume" else 0
    ctx = mp.get_context("spawn")  # no inherited threads or sockets of this process
    ready, go, results = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=run_worker, args=(job, ready, go, results), daemon=True)
             for job in jobs]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            ready.get(timeout=READY_TIMEOUT_S)
        cpu_before = probe.process_cpu_s()
        go.set()
        parts = _collect(results, len(procs), spec.duration_s + 90)
        cpu_after = probe.process_cpu_s()
    except queue.Empty:
        raise BenchFailed(f"the load processes did not connect within {READY_TIMEOUT_S:.0f}s")\
            from None
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    return _report(spec, probe, jobs, parts, stored_before, cpu_before, cpu_after)


def _report(spec: BenchSpec, probe: ServerProbe, jobs: list[WorkerJob], parts: list[dict],
            stored_before: int, cpu_before: float | None, cpu_after: float | None
            ) -> BenchReport:
    hist = Histogram()
    errors: dict[str, int] = {}
    for part in parts:
        hist.merge(Histogram.from_dict(part["histogram"]))
        for name, n in part["errors"].items():
            errors[name] = errors.get(name, 0) + n
    messages = sum(p["messages"] for p in parts)
    elapsed = max(p["elapsed_s"] for p in parts)
    unfinished = sum(p["unfinished"] for p in parts)
    broker_count = None
    if spec.kind == "consume":
        gaps = sum(p["gaps"] for p in parts)
        check = "ok" if not gaps else f"{gaps} messages out of order or missing"
    else:
        indexed = probe.wait_indexed()
        broker_count = probe.stored(spec.topic) - stored_before
        if broker_count == messages:
            check = "ok"
        elif unfinished and messages <= broker_count <= messages + unfinished * jobs[0].batch:
            check = f"ok ({broker_count - messages} stored whose answer did not arrive)"
        else:
            check = (f"MISMATCH: {messages} acknowledged, the broker holds {broker_count} more "
                     f"than before" + ("" if indexed else " (the index did not catch up)"))
    cpu_us = None
    if cpu_before is not None and cpu_after is not None and messages:
        cpu_us = (cpu_after - cpu_before) / messages * 1e6
    ms = 1e-6
    return BenchReport(
        kind=spec.kind, producers=spec.producers, processes=len(jobs), size=spec.size,
        pipeline=spec.pipeline, batch=jobs[0].batch, duration_s=spec.duration_s,
        elapsed_s=elapsed, messages=messages, operations=sum(p["operations"] for p in parts),
        bytes=sum(p["bytes"] for p in parts), p50_ms=hist.percentile(0.5) * ms,
        p99_ms=hist.percentile(0.99) * ms, p999_ms=hist.percentile(0.999) * ms,
        max_ms=hist.max_ns * ms, errors=errors,
        first_error=next((p["first_error"] for p in parts if p["first_error"]), None),
        server_cpu_us_per_msg=cpu_us,
        client_cpu_pct=100 * max(p["cpu_s"] for p in parts) / elapsed if elapsed else 0.0,
        loop="uvloop" if spec.uses_uvloop else "asyncio", count_check=check,
        broker_count=broker_count, server=probe.primary,
        commit_with_next=spec.commit_with_next)
