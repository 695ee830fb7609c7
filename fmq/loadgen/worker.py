"""The entry point of one load process: open its lanes, say it is ready, wait for the start
signal, run until the deadline, drain, and put its totals on the result queue.

Runs uvloop's event loop when asked and installed (``pip install fmq[bench]``).
"""

from __future__ import annotations

import asyncio
import os
import time
import traceback
from dataclasses import dataclass
from typing import Any

from fmq.client.auth import Credentials
from fmq.client.tls import TLSOptions
from fmq.loadgen.driver import Lane, LaneTotals
from fmq.loadgen.login import open_protocol
from fmq.loadgen.plans import Plan, PullPlan, QueueCursor, SendPlan, TxPlan

try:  # the optional extra fmq[bench]
    import uvloop
except ImportError:  # pragma: no cover - depends on what is installed
    uvloop = None

#: How long in-flight operations may take to finish after the deadline.
DRAIN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class WorkerJob:
    """What one process runs (picklable)."""

    host: str
    port: int
    kind: str  # produce, consume or tx
    lanes: int
    window: int
    topic: str
    size: int
    batch: int
    duration_s: float
    use_uvloop: bool
    producer_group: str = "fmq-bench"
    cursors: tuple[tuple[tuple[str, int, int, int], ...], ...] = ()  # per lane, for consume
    follow: bool = False
    tls: TLSOptions | None = None  # a secured server (docs/security.md)
    credentials: Credentials | None = None
    commit_with_next: bool = False  # tx: each COMMIT written with the next PREPARE


def _plan(job: WorkerJob, lane: int) -> Plan:
    if job.kind == "produce":
        return SendPlan(job.topic, job.size, job.batch)
    if job.kind == "tx":
        return TxPlan(job.topic, job.size, job.producer_group, job.commit_with_next)
    return PullPlan([QueueCursor(*c) for c in job.cursors[lane]], follow=job.follow)


async def _run(job: WorkerJob, ready: Any, go: Any) -> dict:
    loop = asyncio.get_running_loop()
    totals = LaneTotals()
    lanes: list[Lane] = []
    for i in range(job.lanes):
        lane = Lane(_plan(job, i), totals, job.window)
        await open_protocol(job.host, job.port, lane, job.tls, job.credentials)
        lanes.append(lane)
    ready.put(os.getpid())
    await loop.run_in_executor(None, go.wait)
    cpu0 = os.times()
    start = time.perf_counter_ns()
    deadline = start + int(job.duration_s * 1e9)
    for lane in lanes:
        lane.begin(deadline)
    waiting = [lane.done for lane in lanes]
    _, late = await asyncio.wait(waiting, timeout=job.duration_s + DRAIN_TIMEOUT_S)
    # The run lasts until its last answer: past the deadline while in-flight requests drain,
    # before it when consumers reached the end of their queues.
    end = time.perf_counter_ns() if late or not totals.last_answer_ns else totals.last_answer_ns
    cpu1 = os.times()
    gaps = sum(lane.plan.gaps for lane in lanes)
    for lane in lanes:
        lane.close()
    return {
        "histogram": totals.histogram.to_dict(), "messages": totals.messages,
        "bytes": totals.bytes, "operations": totals.operations, "errors": dict(totals.errors),
        "first_error": totals.first_error, "elapsed_s": (end - start) / 1e9,
        "cpu_s": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
        "unfinished": sum(lane.in_flight for lane in lanes), "gaps": gaps,
    }


def run_worker(job: WorkerJob, ready: Any, go: Any, results: Any) -> None:
    """Process target: always puts one dict on ``results`` (with ``failure`` on an error)."""
    try:
        if job.use_uvloop:
            result = uvloop.run(_run(job, ready, go))
        else:
            result = asyncio.run(_run(job, ready, go))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which says it
        ready.put(os.getpid())
        results.put({"failure": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()})
        return
    results.put(result)
