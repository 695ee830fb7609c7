"""The index written by a process of its own (``index_writer = "process"``): killed, it is
started again and nothing is lost; it never outlives its broker; it reports what it
applied so that waiters and long polls wake."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time

import pytest

import fmq
from fmq.datadir import INDEX_DIR
from fmq.index.process_dispatcher import ProcessDispatcher
from fmq.index.store import IndexStore
from fmq.log.placement import now_ms
from tests.crashkit import ROOT
from tests.workloads.crashing_indexer import PLAN_ENV, kills_so_far

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


def test_restarts_back_off_while_the_indexer_keeps_dying_young(tmp_path):
    # The reader thread started a new child the moment the last one died: a child that
    # died at once again and again (after progress each time, which resets the give-up
    # count) was restarted in a tight loop, an interpreter's start after another.
    with fmq.Broker.open(str(tmp_path), config(index_retry_initial_ms=100,
                                               index_retry_max_ms=800)) as b:
        dispatcher = b._dispatcher
        gaps = []
        for _ in range(4):
            pid = dispatcher.pid
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda pid=pid: dispatcher.pid != pid, "a new indexer")
            gaps.append(time.monotonic() - killed)
        assert dispatcher.error is None
        for gap, delay in zip(gaps, [0.1, 0.2, 0.4, 0.8], strict=True):
            assert gap >= delay * 0.9, f"restarted {gap:.3f} s after the kill ({gaps})"
        assert dispatcher.restart_delays == [0.1, 0.2, 0.4, 0.8]
        b.send(fmq.Message("t", b"after"))
        assert b.wait_indexed(DEADLINE)
        assert bodies(b) == [b"after"]


def test_close_does_not_wait_for_a_restart_back_off(tmp_path):
    b = fmq.Broker.open(str(tmp_path), config(index_retry_initial_ms=5000,
                                              index_retry_max_ms=5000))
    b.send(fmq.Message("t", b"one"))
    pid = b._dispatcher.pid
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: b._dispatcher.restart_delays, "the restart's back-off")
    b.send(fmq.Message("t", b"two"))  # no indexer runs: the close indexes it
    started = time.monotonic()
    b.close()
    assert time.monotonic() - started < 4.0
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert bodies(b) == [b"one", b"two"]


@pytest.fixture
def crashing_indexer(tmp_path, monkeypatch):
    """Brokers opened in this test run tests/workloads/crashing_indexer.py as their indexer;
    the returned function arms it (see there)."""
    monkeypatch.setattr(ProcessDispatcher, "indexer_module", "tests.workloads.crashing_indexer")
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    state = str(tmp_path / "kills")

    def arm(point: str, nth: int = 1, kills: int = 1) -> str:
        monkeypatch.setenv(PLAN_ENV, json.dumps({"point": point, "nth": nth, "kills": kills,
                                                 "state": state}))
        return state

    return arm


def test_what_a_killed_indexer_wrote_unreported_wakes_its_queues(tmp_path, crashing_indexer):
    # Killed between its LMDB commit and its report, the indexer's successor reported the
    # stored applied offset with no queues: a pull long-polling the queue that commit made
    # consumable slept until its deadline, and the timer service until its next look.
    state = crashing_indexer("after-write")
    woken: list[set] = []
    data = tmp_path / "data"
    with fmq.Broker.open(str(data), config()) as b:
        b.on_consumable(woken.append)
        b.send(fmq.Message("t", b"x", queue_id=1))
        wait_for(lambda: kills_so_far(state) == 1, "the injected kill")
        wait_for(lambda: b._dispatcher.restarts == 1 and b._dispatcher.applied_offset > 0,
                 "the next indexer's first report")
        wait_for(lambda: any(("t", 1) in q for q in woken), "the queue's wake-up")
        assert bodies(b) == [b"x"]


def test_indexer_refuses_an_index_deleted_under_its_broker(tmp_path):
    # The next indexer opened the deleted index's path and made a new, empty index there:
    # the broker went on reading its own (deleted) one, which nobody wrote any more, and
    # after a restart the new one lacked everything before the point the indexer began.
    data = tmp_path / "data"
    b = fmq.Broker.open(str(data), config())
    try:
        b.send(fmq.Message("t", b"one"))
        assert b.wait_indexed(DEADLINE)
        shutil.rmtree(data / INDEX_DIR)
        os.kill(b._dispatcher.pid, signal.SIGKILL)
        wait_for(lambda: b._dispatcher.error is not None, "the broker to stop indexing")
        assert "deleted" in str(b._dispatcher.error)
        assert not (data / INDEX_DIR).exists(), "the indexer made a new index"
        with pytest.raises(fmq.errors.IndexCorrupt, match="fmq index rebuild"):
            b.send(fmq.Message("t", b"refused"))
    finally:
        b.close()
    with fmq.Broker.open(str(data), config()) as b:  # rebuilt from the log
        assert bodies(b) == [b"one"]


def test_timers_a_killed_indexer_wrote_unreported_wake_the_timer_service(tmp_path,
                                                                       crashing_indexer):
    # As above, for the timer service: it sleeps until its next due timer (none here) and
    # learns of an earlier one only from the report that indexed it.
    state = crashing_indexer("after-write")
    added: list[int] = []
    with fmq.Broker.open(str(tmp_path / "data"), config()) as b:
        wake = b._dispatcher.on_timers_added
        b._dispatcher.on_timers_added = lambda: (added.append(1), wake())
        b._timers.schedule([fmq.Message("t", b"later")], now_ms() + 3_600_000)
        wait_for(lambda: kills_so_far(state) == 1, "the injected kill")
        wait_for(lambda: added, "the timer service's wake-up")
