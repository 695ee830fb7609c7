"""The topics' figures the console keeps (fmq/console/topic_sizes.py), on a real broker's
index: exact byte counts as the index's own walk gives them, a refresh that walks only what
changed since the last one, a bounded walk per refresh (estimates until every entry is
counted), retention cutting queues, and page loads between two refreshes sharing figures."""

from __future__ import annotations

import asyncio

import fmq
from fmq.console.topic_sizes import CHUNK, TopicSizes

EVERY_S = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sizes_of(b: fmq.Broker, clock: Clock) -> TopicSizes:
    async def read(fn, *args):
        return await asyncio.to_thread(fn, *args)
    return TopicSizes(lambda: b.inventory, read, EVERY_S, clock)


def truth(b: fmq.Broker, topic: str) -> tuple[int, int]:
    """(messages, bytes) by the index's own walk of every entry."""
    messages = size = 0
    for (t, qid), (lo, hi) in b._index.all_queues().items():
        if t == topic:
            messages += hi - lo
            size += b._index.queue_bytes(t, qid)
    return messages, size


def fill(b: fmq.Broker, topic: str, queue_id: int, count: int, start: int = 0) -> None:
    for first in range(start, start + count, 500):
        b.send_batch([fmq.Message(topic, b"x" * (1 + i % 300), queue_id=queue_id)
                      for i in range(first, min(first + 500, start + count))])
    assert b.wait_indexed(60)


def test_counts_exactly_then_walks_only_what_arrived(tmp_path):
    with fmq.Broker.open(str(tmp_path), fmq.BrokerConfig(queues_per_topic=2,
                                                         checkpoint_interval_ms=0)) as b:
        fill(b, "t", 0, 2 * CHUNK + 100)
        fill(b, "t", 1, 10)
        clock = Clock()
        sizes = sizes_of(b, clock)
        figures = asyncio.run(sizes.current())
        row = figures.topics["t"]
        assert (row["messages"], row["bytes"]) == truth(b, "t") and row["exact"]
        assert sizes.walked == 2 * CHUNK + 110

        async def twice():  # pages loaded within one interval share the figures
            return await sizes.current(), await sizes.current()
        clock.now += EVERY_S / 2
        again, third = asyncio.run(twice())
        assert again is figures is third and sizes.walked == 2 * CHUNK + 110

        fill(b, "t", 0, 100, start=2 * CHUNK + 100)
        clock.now += EVERY_S
        row = asyncio.run(sizes.current()).topics["t"]
        assert (row["messages"], row["bytes"]) == truth(b, "t") and row["exact"]
        assert sizes.walked == 2 * CHUNK + 210  # the 100 new entries only


def test_a_bounded_walk_estimates_until_every_entry_is_counted(tmp_path):
    with fmq.Broker.open(str(tmp_path), fmq.BrokerConfig(queues_per_topic=1,
                                                         checkpoint_interval_ms=0)) as b:
        fill(b, "t", 0, 3 * CHUNK)
        messages, size = truth(b, "t")
        clock = Clock()
        sizes = sizes_of(b, clock)
        sizes.budget = CHUNK
        rounds = []
        for _ in range(5):
            row = asyncio.run(sizes.current()).topics["t"]
            rounds.append((row["exact"], sizes.walked))
            assert row["messages"] == messages
            if row["exact"]:
                assert row["bytes"] == size
            else:  # bodies of 1..300 bytes, evenly: the mean of a chunk is close
                assert abs(row["bytes"] - size) < size * 0.1, (row["bytes"], size)
            clock.now += EVERY_S
        assert rounds[:3] == [(False, CHUNK), (False, 2 * CHUNK), (True, 3 * CHUNK)]
        assert rounds[3:] == [(True, 3 * CHUNK)] * 2  # nothing new: nothing walked


def test_retention_cutting_a_queue_is_counted_again_from_its_new_start(tmp_path):
    cfg = dict(segment_size=64 * 1024, max_message_size=4096, queues_per_topic=1, checkpoint_interval_ms=0,
               retention_interval_ms=0)
    with fmq.Broker.open(str(tmp_path), fmq.BrokerConfig(**cfg)) as b:
        fill(b, "t", 0, 2 * CHUNK)
    with fmq.Broker.open(str(tmp_path), fmq.BrokerConfig(**cfg)) as b:
        clock = Clock()
        sizes = sizes_of(b, clock)
        before = asyncio.run(sizes.current()).topics["t"]
        assert (before["messages"], before["bytes"]) == truth(b, "t")
    with fmq.Broker.open(str(tmp_path), fmq.BrokerConfig(**cfg, retention_bytes=200_000)) as b:
        assert b.enforce_retention()
        assert b.wait_indexed(60)
        sizes.inventory = lambda: b.inventory
        sizes._inventory = b.inventory  # the same counts carried over: only the cut differs
        clock.now += EVERY_S
        after = asyncio.run(sizes.current()).topics["t"]
        assert (after["messages"], after["bytes"]) == truth(b, "t")
        assert after["messages"] < before["messages"] and after["exact"]
