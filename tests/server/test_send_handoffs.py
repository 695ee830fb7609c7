"""The send path's hand-offs between threads (the event loop places, the acknowledger
flushes and hands the answers back, the index thread indexes what is flushed): nothing
sent is left unacknowledged or unindexed for want of a wake-up, with or without other
traffic; and the threads carry their names, for per-thread figures."""

from __future__ import annotations

import os
import re
import threading

import pytest

from fmq.client import Client, Producer
from fmq.protocol import Op

from .conftest import FAST
from .harness import broker_stats, wait_until


def thread_switches(pid: int, name: str) -> int:
    """Voluntary context switches of the server's thread called ``name`` (each time it
    slept and was woken)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().strip() != name:
                continue
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            return int(re.search(r"^voluntary_ctxt_switches:\s*(\d+)", f.read(), re.M)[1])
    raise AssertionError(f"the server has no thread called {name}")


def pull(c: Client, topic: str, queue_id: int, offset: int) -> list[bytes]:
    """A long poll: answered at once when the index holds ``offset``, else woken when it
    does (or empty after 20 s)."""
    r = c.call(Op.PULL, {"topic": topic, "queue_id": queue_id, "offset": offset,
                         "max_messages": 10, "wait_ms": 20_000}, timeout=60)
    return [m["body"] for m in r["messages"]]


def thread_names(pid: int) -> set[str]:
    names = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            names.add(f.read().strip())
    return names


def child_names(pid: int) -> set[str]:
    """The operating system's names of the server's child processes."""
    names = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            for child in f.read().split():
                try:
                    with open(f"/proc/{child}/comm") as comm:
                        names.add(comm.read().strip())
                except FileNotFoundError:  # it ended meanwhile
                    pass
    return names


@pytest.mark.parametrize("writer,index_thread", [("thread", "fmq-dispatcher"),
                                                 ("process", "fmq-idx-reports")])
def test_the_servers_threads_carry_their_names_for_the_operating_system(
        start_server, writer, index_thread):
    # Per-thread figures (top -H, bench/threads_profile.py) need them: Python 3.11 names
    # its threads only for itself, so every thread showed the process's name.
    srv = start_server({**FAST, "index_writer": writer})
    with Producer(srv.address, retries=0) as p:
        p.send("named", b"x")
    pid = srv.proc.pid
    names = thread_names(pid)
    # The loop leads the flushes (SendBatcher.LOOP_FLUSH): its flusher thread writes them,
    # another waits for the flushes a thread leads; no acknowledger thread.
    assert {"fmq-flusher", "fmq-flush-wait", index_thread, "fmq-maintenance"} <= names, names
    assert "fmq-send-acker" not in names, names
    assert thread_switches(pid, "fmq-flusher") > 0  # it waited for at least one flush
    if writer == "process":  # the indexer process too (once started), not one more "python"
        wait_until(lambda: "fmq-indexer" in child_names(pid), 60,
                   "the indexer process named fmq-indexer")


def test_a_pull_after_each_acknowledgement_gets_its_message_without_other_traffic(start_server):
    # The acknowledgement may arrive before the index has the message: the pull then waits
    # and must be woken by that index write; no later write comes to wake it otherwise.
    srv = start_server(FAST)
    with Producer(srv.address, retries=0) as p, Client(srv.address, retries=0) as c:
        for i in range(50):
            r = p.send("ryw", b"n%d" % i, queue_id=0)
            assert pull(c, "ryw", 0, r.queue_offset) == [b"n%d" % i]


def test_concurrent_sends_are_all_acknowledged_and_indexed(start_server):
    srv = start_server(FAST)
    results: dict[int, list] = {}

    def produce(n: int) -> None:
        with Producer(srv.address, retries=0) as p:
            results[n] = [p.send("load", b"%d-%d" % (n, i)) for i in range(40)]

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sum(len(r) for r in results.values()) == 24 * 40
    wait_until(lambda: broker_stats(srv.address)["index_lag"] == 0, 30, "the index")
    with Client(srv.address, retries=0) as c:
        bodies = []
        for qid in {r.queue_id for rs in results.values() for r in rs}:
            offset = 0
            while got := c.call(Op.PULL, {"topic": "load", "queue_id": qid, "offset": offset,
                                          "max_messages": 500, "wait_ms": 0})["messages"]:
                bodies += [m["body"] for m in got]
                offset = got[-1]["queue_offset"] + 1
    assert sorted(bodies) == sorted(b"%d-%d" % (n, i) for n in range(24) for i in range(40))
