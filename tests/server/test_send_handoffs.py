"""The send path's hand-offs between threads: a flush wakes the acknowledger once, the
event loop once, and the index thread once, with the keys and values the loop prepared;
nothing sent is left unacknowledged or unindexed without other traffic."""

from __future__ import annotations

import os
import re
import threading

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


def pull_now(c: Client, topic: str, queue_id: int, offset: int) -> list[bytes]:
    r = c.call(Op.PULL, {"topic": topic, "queue_id": queue_id, "offset": offset,
                         "max_messages": 10, "wait_ms": 0})
    return [m["body"] for m in r["messages"]]


def test_the_event_loop_prepares_the_index_write_of_every_send_flush(start_server):
    srv = start_server(FAST)
    with Producer(srv.address, retries=0) as p:
        p.send("warm", b"x")  # connections and topics made before counting
        before = broker_stats(srv.address)
        for i in range(200):  # one at a time: every send is a flush of its own
            p.send("h", b"m%d" % i, queue_id=0)
        after = broker_stats(srv.address)
    flushes = after["flushes"] - before["flushes"]
    handed = after["index_writes_handed_over"] - before["index_writes_handed_over"]
    assert flushes >= 200
    # Each flush's keys and values were made on the loop; the index thread only wrote them
    # (before, the index thread did all of it, woken three times per flush on average).
    assert handed >= 190, f"{handed} of {flushes} flushes prepared by the event loop"
    assert broker_stats(srv.address)["index_lag"] == 0
    woken = thread_switches(srv.proc.pid, "fmq-dispatcher")
    assert woken > 0  # the thread that writes them is there, under its name


def test_a_send_is_consumable_when_its_acknowledgement_arrives(start_server):
    # With nothing else writing, the event loop indexes a flush right after answering it,
    # before it reads the next request: a pull sent after the acknowledgement finds it.
    srv = start_server(FAST)
    with Producer(srv.address, retries=0) as p, Client(srv.address, retries=0) as c:
        for i in range(50):
            r = p.send("ryw", b"n%d" % i, queue_id=0)
            assert pull_now(c, "ryw", 0, r.queue_offset) == [b"n%d" % i]


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
