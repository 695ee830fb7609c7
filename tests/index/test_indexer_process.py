"""The index written by a process of its own (``index_writer = "process"``): killed, it is
started again and nothing is lost; it never outlives its broker; it reports what it
applied so that waiters and long polls wake."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import pytest

import fmq
from fmq.datadir import INDEX_DIR
from fmq.index.store import IndexStore

#: Generous: the machine is shared.
DEADLINE = 60.0


def config(**kw) -> fmq.BrokerConfig:
    base = dict(segment_size=64 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
                retention_interval_ms=0, index_writer="process")
    base.update(kw)
    return fmq.BrokerConfig(**base)


def bodies(b: fmq.Broker) -> list[bytes]:
    return sorted(m.body for v in b.reads.all_messages(["t"]).values() for m in v)


def wait_for(cond, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has exited
    except FileNotFoundError:
        return True


def test_killed_indexer_is_restarted_and_nothing_is_lost(tmp_path):
    sent: list[bytes] = []
    stop = threading.Event()
    with fmq.Broker.open(str(tmp_path), config()) as b:
        def produce(n: int) -> None:
            i = 0
            while not stop.is_set() or i < 200:
                body = f"p{n}-{i}".encode()
                b.send(fmq.Message("t", body))
                sent.append(body)
                i += 1

        producers = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
        for t in producers:
            t.start()
        try:
            for _ in range(2):  # twice, under load
                wait_for(lambda: b._dispatcher.applied_offset > 0, "the index to advance")
                first = b._dispatcher.pid
                os.kill(first, signal.SIGKILL)
                wait_for(lambda first=first: b._dispatcher.pid != first, "a new indexer")
                time.sleep(0.2)
        finally:
            stop.set()
            for t in producers:
                t.join()
        assert b._dispatcher.restarts == 2
        assert b._dispatcher.error is None
        assert b.wait_indexed(DEADLINE)
        assert bodies(b) == sorted(sent)
        online = b._index.dump()
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), config(index_writer="thread")) as b:
        assert b._index.dump() == online


def test_indexer_that_keeps_dying_stops_the_index_and_sends_are_refused(tmp_path):
    with fmq.Broker.open(str(tmp_path), config()) as b:
        b.send(fmq.Message("t", b"before"))
        dispatcher = b._dispatcher
        for _ in range(dispatcher.max_restarts + 1):
            pid = dispatcher.pid
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda pid=pid: dispatcher.pid != pid or dispatcher.error is not None,
                     "a new indexer or the give-up")
        wait_for(lambda: dispatcher.error is not None, "the broker to give up")
        assert "died" in str(dispatcher.error)
        with pytest.raises(fmq.errors.IndexCorrupt, match="restart the broker"):
            b.send(fmq.Message("t", b"after"))
    with fmq.Broker.open(str(tmp_path), config()) as b:  # a restart indexes again
        assert bodies(b) == [b"before"]
        b.send(fmq.Message("t", b"after"))
        assert b.wait_indexed(DEADLINE)
        assert bodies(b) == [b"after", b"before"]


def test_indexer_ends_with_its_broker(tmp_path):
    b = fmq.Broker.open(str(tmp_path), config())
    pid = b._dispatcher.pid
    b.send(fmq.Message("t", b"one"))
    b.close()
    assert process_gone(pid)


def test_waiters_and_consumable_callbacks_are_woken(tmp_path):
    woken: list[set] = []
    with fmq.Broker.open(str(tmp_path), config()) as b:
        b.on_consumable(woken.append)
        r = b.send(fmq.Message("t", b"x", queue_id=1))
        assert b._dispatcher.wait_applied(r.offset + 1, DEADLINE)
        wait_for(lambda: any(("t", 1) in q for q in woken), "the consumable callback")


def test_close_does_not_wait_on_a_stopped_indexer_and_indexes_the_rest(tmp_path):
    # A child that does not run (stopped here; blocked on LMDB's writer lock or starting
    # up elsewhere) held the close: it waited for the child to exit.
    b = fmq.Broker.open(str(tmp_path), config())
    b.send(fmq.Message("t", b"indexed"))
    assert b.wait_indexed(DEADLINE)
    pid = b._dispatcher.pid
    os.kill(pid, signal.SIGSTOP)
    closer = threading.Thread(target=b.close)
    try:
        for i in range(50):
            b.send(fmq.Message("t", f"flushed {i}".encode()))
        end = b._log.flushed_offset
        closer.start()
        closer.join(DEADLINE)
        assert not closer.is_alive(), "the close waited on the stopped indexer process"
    finally:
        if not process_gone(pid):
            os.kill(pid, signal.SIGCONT)  # lets a hung close end
        if closer.is_alive():
            closer.join()
    assert process_gone(pid)
    index = IndexStore(str(tmp_path / INDEX_DIR), verify_length=False)
    try:  # the close indexed what the child had not
        assert index.applied_offset() == end
    finally:
        index.close()
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert bodies(b) == sorted([b"indexed"] + [f"flushed {i}".encode() for i in range(50)])
        online = b._index.dump()
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), config(index_writer="thread")) as b:
        assert b._index.dump() == online
