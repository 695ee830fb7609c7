"""Scheduled delivery in the embedded broker: a TIMER record is durable at once, becomes a
consumable MESSAGE when due (exactly once), and the pending timers survive a restart and an
index rebuild."""

from __future__ import annotations

import os
import shutil

import pytest

import fmq
from fmq import InvalidArgument, Message
from fmq.admin.rebuild_index import rebuild_index
from fmq.engine import retries
from fmq.index.store import IndexStore
from fmq.log.placement import now_ms
from fmq.log.record import RecordType
from fmq.log.scanner import LogScanner
from tests.crashkit import run_child
from tests.server.harness import wait_until

HOUR_MS = 3_600_000


def _all(broker, topic):
    return [m for msgs in broker.reads.all_messages([topic]).values() for m in msgs]


def test_a_due_message_is_delivered_once_and_a_future_one_waits(broker):
    [later] = broker._timers.schedule([Message("t", b"later", key="k")], now_ms() + HOUR_MS)
    [soon] = broker._timers.schedule([Message("t", b"soon", tags="x", properties={"p": "1"})],
                                    now_ms() + 200)
    assert later.offset < soon.offset and later.deliver_at > soon.deliver_at
    wait_until(lambda: len(_all(broker, "t")) == 1, what="the due message")
    [m] = _all(broker, "t")
    assert (m.body, m.tags, m.properties) == (b"soon", "x", {"p": "1"})
    assert m.store_time >= soon.deliver_at
    assert broker._timers.pending() == 1
    # The due timer is gone from the index: another round delivers nothing more.
    assert broker._timers.deliver_due() == 0
    assert broker._timers.deliver_due(now_ms() + 2 * HOUR_MS) == 1
    assert sorted(m.body for m in _all(broker, "t")) == [b"later", b"soon"]
    assert broker._timers.pending() == 0


def test_a_chosen_queue_is_kept_and_a_past_time_delivers_at_once(broker):
    broker._timers.schedule([Message("q", b"x", queue_id=3)], 0)
    wait_until(lambda: len(_all(broker, "q")) == 1, what="the due message")
    assert _all(broker, "q")[0].queue_id == 3


def test_bad_requests_are_refused_and_store_nothing(broker):
    end = broker._log.next_offset
    for bad in (-1, "soon", 1.5, True, 1 << 63):
        with pytest.raises(InvalidArgument, match="deliver_at"):
            broker._timers.schedule([Message("t", b"x")], bad)
    with pytest.raises(InvalidArgument, match="reserved"):
        broker._timers.schedule([Message("%DLQ%g", b"x")], now_ms())
    assert broker._log.next_offset == end and broker._timers.pending() == 0


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
            b._timers.schedule([Message("t", b"m%d" % i + b"." * 900)], due + i)
        b._timers.deliver_due(due + 9)  # the first ten
        assert b._timers.pending() == 30
    before = _timer_tables(data)
    assert len(before[0]) == len(before[1]) == 30
    rebuild_index(data, small_config)
    assert _timer_tables(data) == before
    shutil.rmtree(os.path.join(data, "index"))  # and through recovery's redo on open
    with fmq.Broker.open(data, small_config) as b:
        assert b._timers.pending() == 30
        assert len(_all(b, "t")) == 10
        b._timers.deliver_due(due + HOUR_MS)
        assert sorted(m.body for m in _all(b, "t")) == sorted(
            b"m%d" % i + b"." * 900 for i in range(40))
    assert _timer_tables(data) == ([], [])


def _fill(b, n=60):
    for _ in range(n):
        b.send(Message("u", b"." * 1000))
    b.wait_indexed()


def test_retention_moves_pending_timers_out_of_the_segments_it_deletes(tmp_path, small_config):
    cfg = small_config.replace(retention_bytes=1)
    data = str(tmp_path / "d")
    due = now_ms() + HOUR_MS
    with fmq.Broker.open(data, cfg) as b:
        [s] = b._timers.schedule([Message("t", b"wait", key="k", properties={"p": "1"})], due)
        _fill(b)
        assert b.enforce_retention()
        assert b._log.first_offset > s.offset  # the TIMER's segment is gone ...
        assert b._timers.relocations == 1 and b._timers.pending() == 1  # ... not the timer
        [(moved, _size)] = b._index.timers.stored_before(1 << 62, 10)
        assert moved > s.offset
    os.remove(os.path.join(data, "checkpoint"))  # redo all that is left of the log
    with fmq.Broker.open(data, cfg) as b:
        assert b._index.timers.by_topic() == {"t": 1}
        assert b._timers.deliver_due(due) == 1
        [m] = _all(b, "t")
        assert (m.body, m.key, m.properties) == (b"wait", "k", {"p": "1"})
        assert b._timers.pending() == 0


def test_timers_over_the_limit_move_once_per_pass_and_only_when_it_frees_the_limit(
        tmp_path, small_config):
    limit = 64 * 1024
    cfg = small_config.replace(retention_bytes=limit)
    with fmq.Broker.open(str(tmp_path / "d"), cfg) as b:
        due = now_ms() + HOUR_MS
        for _ in range(20):  # 2 000 timers, about 260 KiB: four times the limit
            b._timers.schedule([Message("t", b"x" * 60) for _ in range(100)], due)

        def log_bytes():
            return sum(s.size for s in b._log.segments)

        def sends(n):  # n KiB of plain messages behind the timers
            for _ in range(n):
                b.send(Message("u", b"." * 1000))
            b.wait_indexed()

        sends(32)  # less than the limit: moving the timers would write more than it frees
        b.enforce_retention()
        assert b._timers.relocations == 0
        pinning = b.stats()["timers_pinning_retention_bytes"]
        assert pinning == b._index.timers.pending_bytes() > limit
        sends(100 - 32)  # now more than the limit: each timer moves once
        assert b.enforce_retention()
        assert b._timers.relocations == 2000
        assert log_bytes() < pinning + limit  # the sends behind the timers are gone
        end = b._log.next_offset
        for _ in range(3):  # idle: nothing moves, nothing is written
            assert b.enforce_retention() == []
        assert (b._timers.relocations, b._log.next_offset) == (2000, end)
        sends(100)
        b.enforce_retention()
        assert b._timers.relocations == 4000 and b._timers.pending() == 2000
        assert b._timers.deliver_due(due) == 1024 and b._timers.deliver_due(due) == 976
        b.wait_indexed()
        b.enforce_retention()  # the timers are delivered: the log gets under the limit
        assert log_bytes() <= limit and b.stats()["timers_pinning_retention_bytes"] == 0


#: Where the child dies while retention relocates its timers: before the copies' fdatasync
#: (written, not synced), or inside their pwrite (a torn batch of copies).
RELOCATION_CRASHES = {
    "before-fdatasync": {"op": "fdatasync", "nth": 1, "mode": "before"},
    "torn-pwrite": {"op": "pwrite", "nth": 1, "records": 2, "extra": 20},
}


@pytest.mark.parametrize("crash", sorted(RELOCATION_CRASHES))
def test_a_kill_during_timer_relocation_keeps_each_timer_once(tmp_path, crash):
    cfg = dict(segment_size=16 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
               retention_interval_ms=0, retention_bytes=1, timer_batch=1000)
    data = str(tmp_path / "d")
    child = run_child("timer_delivery_crash", data, str(tmp_path / "acks"), cfg=cfg,
                      count=20, due_in_ms=HOUR_MS, fill=60, arm=RELOCATION_CRASHES[crash])
    assert child.killed, child.stderr
    assert [a["event"] for a in child.acks] == ["scheduled"]
    with fmq.Broker.open(data, fmq.BrokerConfig(**cfg)) as b:
        assert b._timers.pending() == 20
        b.enforce_retention()  # now to completion
        assert b._timers.pending() == 20
        assert b._timers.deliver_due(now_ms() + 2 * HOUR_MS) == 20
        bodies = sorted(m.body for m in _all(b, "t"))
    assert bodies == sorted(b"timer-%d" % i for i in range(20))


def _nack_until_dead(b, group, topic, loc, deliveries):
    """Fail the message at ``loc`` every time it comes back; return what was seen."""
    seen = []
    while True:
        m = b.reads.pull(*loc, 1)[0]
        seen.append(m)
        _times, dead = b.deliveries.nack(group, *loc)
        if dead:
            return seen
        b.wait_indexed()
        assert b._timers.deliver_due(now_ms() + 10 * HOUR_MS) == 1  # not waiting for it
        retry = retries.retry_topic(group)
        got = [m for msgs in b.reads.all_messages([retry]).values() for m in msgs]
        last = max(got, key=lambda m: m.offset)
        loc = (retry, last.queue_id, last.queue_offset)
        assert len(seen) <= deliveries


def test_nack_redelivers_to_that_group_only_then_dead_letters_and_redrive(tmp_path,
                                                                        small_config):
    cfg = small_config.replace(retry_delays="1s 2s 3s", max_reconsume_times=3)
    with fmq.Broker.open(str(tmp_path / "d"), cfg) as b:
        r = b.send(Message("orders", b"pay", key="k1", properties={"a": "1"}))
        b.wait_indexed()
        seen = _nack_until_dead(b, "g", "orders", ("orders", r.queue_id, r.queue_offset), 4)
        assert [m.body for m in seen] == [b"pay"] * 4
        assert [m.properties.get(retries.RECONSUME_TIMES) for m in seen] == [None, "1", "2",
                                                                             "3"]
        assert all(m.properties[retries.ORIGIN_TOPIC] == "orders" for m in seen[1:])
        b.wait_indexed()
        b._timers.deliver_due()  # the dead letter is stored as a timer due at once
        b.wait_indexed()
        [dead] = b.deliveries.dead_letters("g")
        assert (dead.body, dead.key, dead.properties["a"]) == (b"pay", "k1", "1")
        assert dead.properties[retries.RECONSUME_TIMES] == "3"
        assert b.deliveries.dead_letters("other") == []
        assert b.reads.all_messages(["orders"])[("orders", r.queue_id)][0].body == b"pay"
        assert b.deliveries.redrive("g") == 1
        assert b.deliveries.redrive("g") == 0  # redriven once
        b.wait_indexed()
        b._timers.deliver_due()
        b.wait_indexed()
        back = [m for msgs in b.reads.all_messages([retries.retry_topic("g")]).values()
                for m in msgs]
        assert back[-1].properties[retries.RECONSUME_TIMES] == "0"
        assert b.deliveries.dead_letters("g") == []


def _timer_dues(b):
    return [due for due, _o, _s in b._index.timers.due(1 << 62, 1000)]


def test_nack_waits_for_the_back_off_level_of_its_attempt(broker):
    cfg_levels = broker.config.retry_delays_ms
    r = broker.send(Message("orders", b"x"))
    broker.wait_indexed()
    before = now_ms()
    broker.deliveries.nack("g", "orders", r.queue_id, r.queue_offset)
    broker.deliveries.nack("g", "orders", r.queue_id, r.queue_offset, delay_ms=60_000)
    broker.wait_indexed()
    [first, second] = sorted(_timer_dues(broker))
    assert before + cfg_levels[0] <= first <= now_ms() + cfg_levels[0]
    assert before + 60_000 <= second <= now_ms() + 60_000
    with pytest.raises(InvalidArgument, match="no message"):
        broker.deliveries.nack("g", "orders", r.queue_id, r.queue_offset + 5)
    with pytest.raises(InvalidArgument, match="delay"):
        broker.deliveries.nack("g", "orders", r.queue_id, r.queue_offset, delay_ms=-1)


#: Where the child dies: at the 5th delivery round's fdatasync (its MESSAGEs written, not
#: synced), or inside the 5th round's pwrite (a torn batch of MESSAGEs).
DELIVERY_CRASHES = {
    "before-fdatasync": {"op": "fdatasync", "nth": 5, "mode": "before"},
    "torn-pwrite": {"op": "pwrite", "nth": 5, "records": 3, "extra": 20},
}


@pytest.mark.parametrize("crash", sorted(DELIVERY_CRASHES))
def test_a_kill_during_delivery_delivers_every_timer_exactly_once(tmp_path, crash):
    cfg = dict(segment_size=256 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
               retention_interval_ms=0,
               timer_batch=16)
    data = str(tmp_path / "d")
    child = run_child("timer_delivery_crash", data, str(tmp_path / "acks"), cfg=cfg,
                      count=200, due_in_ms=300, arm=DELIVERY_CRASHES[crash])
    assert child.killed, child.stderr
    assert [a["event"] for a in child.acks] == ["scheduled"]
    fired = sum(1 for rec in LogScanner(os.path.join(data, "log"))
                if rec.type == RecordType.MESSAGE and rec.ref_offset >= 0)
    assert 16 * 4 <= fired < 200  # the crash came in the middle of the deliveries
    with fmq.Broker.open(data, fmq.BrokerConfig(**cfg)) as b:
        wait_until(lambda: b._timers.pending() == 0, what="no timer pending")
        b.wait_indexed()
        bodies = sorted(m.body for m in _all(b, "t"))
    assert bodies == sorted(b"timer-%d" % i for i in range(200))


def test_pending_counts_per_topic_follow_adds_deliveries_and_redo(tmp_path, small_config):
    data = str(tmp_path / "d")
    with fmq.Broker.open(data, small_config) as b:
        far = now_ms() + HOUR_MS
        b._timers.schedule([Message("a", b"1"), Message("a", b"2"), Message("b", b"3")], far)
        b._timers.schedule([Message("b", b"4")], far + HOUR_MS)
        b.wait_indexed()
        assert b._index.timers.by_topic() == {"a": 2, "b": 2}
        b._timers.deliver_due(far)
        assert b._index.timers.by_topic() == {"b": 1}
    os.remove(os.path.join(data, "checkpoint"))  # the next open redoes the whole log
    with fmq.Broker.open(data, small_config) as b:
        assert b._index.timers.by_topic() == {"b": 1}
        assert b._timers.pending() == 1


#: Where the child dies while it redrives 600 dead letters in batches of 256 (each batch:
#: its copies' group commit, then the offset commit's): right after the second batch's
#: copies are durable, inside the pwrite of its offset commit (torn), or before that
#: commit's fdatasync (written, so a process crash keeps it).
REDRIVE_CRASHES = {
    "after-copies": ({"op": "fdatasync", "nth": 3, "mode": "after"}, 256),
    "torn-offset-commit": ({"op": "pwrite", "nth": 4, "records": 0, "extra": 20}, 256),
    "before-offset-fdatasync": ({"op": "fdatasync", "nth": 4, "mode": "before"}, 0),
}


@pytest.mark.parametrize("writer", ["thread", "process"])
@pytest.mark.parametrize("crash", sorted(REDRIVE_CRASHES))
def test_a_kill_during_redrive_loses_no_dead_letter_and_repeats_at_most_one_batch(
        tmp_path, crash, writer):
    arm, repeated = REDRIVE_CRASHES[crash]
    # One queue and one segment: the batches are 256, 256, 88 and each write is one pwrite.
    cfg = dict(segment_size=4 * 1024 * 1024, max_message_size=4096, queues_per_topic=1,
               checkpoint_interval_ms=0, retention_interval_ms=0, max_reconsume_times=0,
               timer_poll_ms=3_600_000, index_writer=writer)
    data = str(tmp_path / "d")
    child = run_child("redrive_crash", data, str(tmp_path / "acks"), cfg=cfg, count=600,
                      arm=arm)
    assert child.killed, child.stderr
    assert [a["event"] for a in child.acks] == ["dead"]
    # With index_writer "process" the indexer opens the index the broker recovered and
    # writes meanwhile.
    with fmq.Broker.open(data, fmq.BrokerConfig(**cfg)) as b:
        assert 0 < b.deliveries.redrive("g") < 600  # the rest, after the crash
        assert b.deliveries.dead_letters("g") == []
        while b._timers.deliver_due(now_ms()):
            pass
        b.wait_indexed()
        bodies = sorted(m.body for m in _all(b, retries.retry_topic("g")))
    assert sorted(set(bodies)) == sorted(b"dead-%d" % i for i in range(600))  # none lost
    assert len(bodies) == 600 + repeated  # the batch whose commit the crash cut, again
