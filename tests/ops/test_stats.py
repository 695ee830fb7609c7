"""The broker-side figures behind ``fmq stats`` and the metrics, on an embedded broker."""

from __future__ import annotations

import time

import fmq
from fmq.engine.stats import index_lag_ms


def test_index_lag_seconds_is_the_wait_of_the_oldest_unindexed_record(broker):
    first = broker.send(fmq.Message("t", b"a")).offset
    broker.send(fmq.Message("t", b"b"))
    broker.wait_indexed()
    flushed = broker._log.flushed_offset
    assert index_lag_ms(broker._log, flushed, flushed) == 0
    time.sleep(0.05)
    # as if the index had applied nothing: the first record has waited since it was stored
    lag = index_lag_ms(broker._log, first, flushed)
    assert 50 <= lag < 60_000
    assert broker.stats()["index_lag_ms"] == 0  # caught up


def test_flush_histograms_count_every_synchronous_flush(broker):
    before, _ = broker._log.flush_stats.snapshot()
    for _ in range(3):
        broker.send(fmq.Message("t", b"x" * 100, queue_id=0))
    latency, size = broker._log.flush_stats.snapshot()
    assert sum(latency.counts) - sum(before.counts) == 3  # one thread: a flush per send
    assert broker.stats()["flushes"] == sum(latency.counts)
    assert sum(size.counts) == sum(latency.counts)
    assert size.total == broker._log.flushed_offset  # every durable byte went through a flush
    assert latency.total > 0


def test_inventory_topics_groups_and_reset(broker):
    for i in range(6):
        broker.send(fmq.Message("t", f"m{i}".encode(), queue_id=i % 2))
    broker.wait_indexed()
    inv = broker.inventory
    (t,) = inv.topics()
    assert (t["topic"], t["queues"], t["messages"]) == ("t", 4, 6)
    assert t["first_store_time"] <= t["last_store_time"]
    assert t["bytes"] == broker._log.flushed_offset  # the six records are the whole log
    broker.offsets.commit("g", [("t", 0, 1)])
    # A group's lag covers every queue of the topic it committed in, uncommitted ones too.
    rows = {r["queue_id"]: r for r in inv.groups("g")}
    assert sorted(rows) == [0, 1, 2, 3]
    assert (rows[0]["committed"], rows[0]["next_offset"], rows[0]["lag"]) == (1, 3, 2)
    assert (rows[1]["committed"], rows[1]["lag"]) == (None, 3)
    changes = inv.reset_offsets("g", "t", None, "latest")
    assert [(c["queue_id"], c["old"], c["new"]) for c in changes] == [
        (0, 1, 3), (1, None, 3), (2, None, 0), (3, None, 0)]
    assert {r["lag"] for r in inv.groups("g")} == {0}
    assert inv.reset_offsets("g", "t", 1, "offset", 99) == [
        {"group": "g", "topic": "t", "queue_id": 1, "old": 3, "new": 3}]  # clamped
