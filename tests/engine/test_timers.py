"""Scheduled delivery in the embedded broker: a TIMER record is durable at once, becomes a
consumable MESSAGE when due (exactly once), and the pending timers survive a restart and an
index rebuild."""

from __future__ import annotations

import os
import shutil
import time

import pytest

import fmq
from fmq import InvalidArgument, Message
from fmq.admin.rebuild_index import rebuild_index
from fmq.index.store import IndexStore
from fmq.tx.log_access import now_ms

HOUR_MS = 3_600_000


def _all(broker, topic):
    return [m for msgs in broker.all_messages([topic]).values() for m in msgs]


def _wait_for(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_a_due_message_is_delivered_once_and_a_future_one_waits(broker):
    [later] = broker.timers.schedule([Message("t", b"later", key="k")], now_ms() + HOUR_MS)
    [soon] = broker.timers.schedule([Message("t", b"soon", tags="x", properties={"p": "1"})],
                                    now_ms() + 200)
    assert later.offset < soon.offset and later.deliver_at > soon.deliver_at
    assert _wait_for(lambda: len(_all(broker, "t")) == 1)
    [m] = _all(broker, "t")
    assert (m.body, m.tags, m.properties) == (b"soon", "x", {"p": "1"})
    assert m.store_time >= soon.deliver_at
    assert broker.timers.pending() == 1
    # The due timer is gone from the index: another round delivers nothing more.
    assert broker.timers.deliver_due() == 0
    assert broker.timers.deliver_due(now_ms() + 2 * HOUR_MS) == 1
    assert sorted(m.body for m in _all(broker, "t")) == [b"later", b"soon"]
    assert broker.timers.pending() == 0


def test_a_chosen_queue_is_kept_and_a_past_time_delivers_at_once(broker):
    broker.timers.schedule([Message("q", b"x", queue_id=3)], 0)
    assert _wait_for(lambda: len(_all(broker, "q")) == 1)
    assert _all(broker, "q")[0].queue_id == 3


def test_bad_requests_are_refused_and_store_nothing(broker):
    end = broker.log.next_offset
    for bad in (-1, "soon", 1.5, True, 1 << 63):
        with pytest.raises(InvalidArgument, match="deliver_at"):
            broker.timers.schedule([Message("t", b"x")], bad)
    with pytest.raises(InvalidArgument, match="reserved"):
        broker.timers.schedule([Message("%DLQ%g", b"x")], now_ms())
    assert broker.log.next_offset == end and broker.timers.pending() == 0


def _timer_tables(data_dir):
    store = IndexStore(os.path.join(data_dir, "index"))
    try:
        dump = store.dump()
        return dump["timers"], dump["timeroff"]
    finally:
        store.close()


def test_pending_timers_survive_a_restart_and_an_index_rebuild(tmp_path, small_config):
    data = str(tmp_path / "data")
    with fmq.Broker.open(data, small_config) as b:
        due = now_ms() + HOUR_MS
        for i in range(40):  # several segments of TIMER records, then deliver some
            b.timers.schedule([Message("t", b"m%d" % i + b"." * 900)], due + i)
        b.timers.deliver_due(due + 9)  # the first ten
        assert b.timers.pending() == 30
    before = _timer_tables(data)
    assert len(before[0]) == len(before[1]) == 30
    rebuild_index(data, small_config)
    assert _timer_tables(data) == before
    shutil.rmtree(os.path.join(data, "index"))  # and through recovery's redo on open
    with fmq.Broker.open(data, small_config) as b:
        assert b.timers.pending() == 30
        assert len(_all(b, "t")) == 10
        b.timers.deliver_due(due + HOUR_MS)
        assert sorted(m.body for m in _all(b, "t")) == sorted(
            b"m%d" % i + b"." * 900 for i in range(40))
    assert _timer_tables(data) == ([], [])


def test_retention_keeps_the_segment_of_a_pending_timer(tmp_path, small_config):
    cfg = small_config.replace(retention_bytes=1)
    with fmq.Broker.open(str(tmp_path / "d"), cfg) as b:
        b.timers.schedule([Message("t", b"wait")], now_ms() + HOUR_MS)
        for _ in range(60):
            b.send(Message("u", b"." * 1000))
        b.wait_indexed()
        b.enforce_retention()
        assert b.log.first_offset == 0  # the TIMER's segment stays
        b.timers.deliver_due(now_ms() + 2 * HOUR_MS)
        b.wait_indexed()
        assert b.enforce_retention()  # delivered: its segment may go
        assert [m.body for m in _all(b, "t")] == [b"wait"]
