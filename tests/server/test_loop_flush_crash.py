"""A server whose event loop leads the flushes (its flusher thread running, no send
acknowledger) SIGKILLed under 64 producers with one send in flight each: after the restart
every acknowledged send is there."""

from __future__ import annotations

import os
import sys
import threading
import time

from fmq.client import Producer
from fmq.errors import FMQError

from .conftest import FAST
from .harness import ServerProcess
from .test_crash_and_feedback import consume_all

PRODUCERS = 64


def thread_names(pid: int) -> set[str]:
    """The operating system's names of the process's threads."""
    names = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.add(f.read().strip())
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return names


#: The fmq command with the loop's flushes switched on (whatever SendBatcher.LOOP_FLUSH's
#: default is).
FLUSHER_FMQ = [sys.executable, "-c",
               "import sys; from fmq.server.ops.batcher import SendBatcher; "
               "SendBatcher.LOOP_FLUSH = True; from fmq.cli.main import cli; "
               "sys.argv[0] = 'fmq'; cli()"]


def test_64_producers_while_the_server_with_the_flusher_is_killed(tmp_path):
    srv = ServerProcess(str(tmp_path / "data"), FAST, program=FLUSHER_FMQ).start()
    try:
        _killed_under_producers(srv)
    finally:
        srv.kill()


def _killed_under_producers(srv: ServerProcess) -> None:
    stop = threading.Event()
    lock = threading.Lock()
    acked: list[bytes] = []

    def producer(i: int) -> None:
        with Producer(srv.address, retries=0, request_timeout=5, connect_timeout=1) as p:
            n = 0
            while not stop.is_set():
                n += 1
                body = f"p{i}-{n}".encode()
                try:
                    p.send("killed", body)
                except FMQError:
                    time.sleep(0.05)  # the server is down: not acknowledged, try on
                    continue
                with lock:
                    acked.append(body)

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(PRODUCERS)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        names = thread_names(srv.proc.pid)
        with lock:
            before_kill = len(acked)
        srv.kill()
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert "fmq-flusher" in names and "fmq-send-acker" not in names, names
    assert before_kill > 100, f"only {before_kill} sends acknowledged before the kill"

    srv.start()
    bodies = {m.body for m in consume_all(srv.address, "killed", "verify")}
    missing = [b for b in acked if b not in bodies]
    assert not missing, f"{len(missing)} acknowledged sends lost, e.g. {missing[:5]}"
