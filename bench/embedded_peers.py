"""The embedded rows of bench/compare.py, each next to what the hardware or the simplest
possible Python allows: ``Broker.send`` from 64 threads against a minimal pure-Python group
commit loop; ``send_batch`` of 64 KiB+ per call against fdatasync'd sequential writes of the
same size; recovery redo after a kill -9 and the reopen after a clean shutdown."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import threading
import time

import fmq

BODY = b"x" * 1024
CFG = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0)


def _threads_for(seconds: float, threads: int, op) -> int:
    """Run ``op()`` in ``threads`` threads for ``seconds``; the number of calls done."""
    done = [0] * threads
    end = time.perf_counter() + seconds

    def run(i: int) -> None:
        n = 0
        while time.perf_counter() < end:
            op()
            n += 1
        done[i] = n

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(done)


def group_commit_loop(path: str, threads: int, seconds: float) -> float:
    """Appends/s of the simplest durable Python design: ``threads`` writers queue 1 KiB
    records, one flusher thread writes what is queued and fdatasyncs, then wakes them."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    cond = threading.Condition()
    pending: list[bytes] = []
    state = {"queued": 0, "flushed": 0, "stop": False}

    def flusher() -> None:
        while True:
            with cond:
                while not pending and not state["stop"]:
                    cond.wait()
                if state["stop"] and not pending:
                    return
                batch, upto = pending[:], state["queued"]
                pending.clear()
            os.write(fd, b"".join(batch))
            os.fdatasync(fd)
            with cond:
                state["flushed"] = upto
                cond.notify_all()

    def append() -> None:
        with cond:
            pending.append(BODY)
            state["queued"] += 1
            mine = state["queued"]
            cond.notify_all()
            while state["flushed"] < mine:
                cond.wait()

    f = threading.Thread(target=flusher)
    f.start()
    t0 = time.perf_counter()
    n = _threads_for(seconds, threads, append)
    rate = n / (time.perf_counter() - t0)
    with cond:
        state["stop"] = True
        cond.notify_all()
    f.join()
    os.close(fd)
    os.unlink(path)
    return rate


def broker_sends(data_dir: str, threads: int, seconds: float) -> float:
    """Durable ``Broker.send`` calls/s from ``threads`` threads."""
    with fmq.Broker.open(data_dir, CFG) as b:
        msg = fmq.Message("bench", BODY)
        t0 = time.perf_counter()
        n = _threads_for(seconds, threads, lambda: b.send(msg))
        rate = n / (time.perf_counter() - t0)
    shutil.rmtree(data_dir)
    return rate


def broker_batch_mb_s(data_dir: str, messages: int, seconds: float) -> tuple[float, int]:
    """MB/s of bodies through ``send_batch`` of ``messages`` 1 KiB messages per call, and the
    log bytes one call writes."""
    with fmq.Broker.open(data_dir, CFG) as b:
        batch = [fmq.Message("bench", BODY) for _ in range(messages)]
        start = b.stats()["log_end"]
        b.send_batch(batch)
        per_call = b.stats()["log_end"] - start
        t0 = time.perf_counter()
        n = _threads_for(seconds, 1, lambda: b.send_batch(batch))
        rate = n * per_call / (time.perf_counter() - t0) / 1e6
    shutil.rmtree(data_dir)
    return rate, per_call


def disk_mb_s(path: str, chunk: int, seconds: float) -> float:
    """MB/s of sequential writes of ``chunk`` bytes, each fdatasync'd."""
    data = b"x" * chunk
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        os.write(fd, data)
        os.fdatasync(fd)
        n += 1
    rate = n * chunk / (time.perf_counter() - t0) / 1e6
    os.close(fd)
    os.unlink(path)
    return rate


def _fill_and_wait(data_dir: str, megabytes: int, filled) -> None:
    with fmq.Broker.open(data_dir, CFG) as b:
        batch = [fmq.Message("bench", BODY, key=f"k{i % 100}") for i in range(256)]
        for _ in range(megabytes * 1024 * 1024 // (len(BODY) + 90) // 256):
            b.send_batch(batch)
        filled.set()
        time.sleep(600)  # killed here


def recovery(data_dir: str, megabytes: int) -> tuple[float, float]:
    """(redo MB/s after a kill -9 with the index and checkpoint deleted, seconds to reopen
    after a clean shutdown)."""
    ctx = mp.get_context("spawn")
    filled = ctx.Event()
    child = ctx.Process(target=_fill_and_wait, args=(data_dir, megabytes, filled))
    child.start()
    if not filled.wait(600):
        child.kill()
        raise RuntimeError("the writer did not finish")
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    shutil.rmtree(os.path.join(data_dir, "index"), ignore_errors=True)
    if os.path.exists(os.path.join(data_dir, "checkpoint")):
        os.unlink(os.path.join(data_dir, "checkpoint"))
    t0 = time.perf_counter()
    b = fmq.Broker.open(data_dir, CFG)
    redo = b.recovery.bytes_replayed / (time.perf_counter() - t0) / 1e6
    b.close()
    t0 = time.perf_counter()
    fmq.Broker.open(data_dir, CFG).close()
    reopen = time.perf_counter() - t0
    shutil.rmtree(data_dir)
    return redo, reopen
