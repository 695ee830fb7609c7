"""A pull's read of the index bounded by bytes (``IndexStore.queue_read``'s ``max_bytes``):
the entries whose records fit, the first always, exactly those a pull keeps of the
unbounded read (``fmq.engine.reads._fitting``), so a Kafka fetch of 1 MiB of a long queue
no longer reads 4096 entries to keep a thousand."""

from __future__ import annotations

from fmq.engine.reads import _fitting
from fmq.index.entries import QueueEntry
from fmq.index.store import IndexStore


def test_a_byte_bounded_read_keeps_the_entries_a_pull_keeps(tmp_path):
    store = IndexStore(str(tmp_path))
    sizes = [100, 250, 80, 1000, 5, 300, 300, 42]
    offset = 0
    batch = []
    for i, size in enumerate(sizes):
        batch.append(QueueEntry("topic", 0, i, offset, size, 0, 1000 + i, None, offset))
        offset += size
    store.apply(batch, offset)
    for start in range(len(sizes) + 1):
        unbounded = store.queue_read("topic", 0, start, 100)
        for max_bytes in (0, 1, 99, 100, 350, 351, 430, 1429, 1430, 10_000):
            lo, hi, got = store.queue_read("topic", 0, start, 100, max_bytes)
            want = unbounded[2][:_fitting(unbounded[2], max_bytes)]
            assert (lo, hi, got) == (*unbounded[:2], want), (start, max_bytes)
            assert len(got) <= 1 or sum(e[2] for e in got) <= max_bytes
    assert len(store.queue_read("topic", 0, 0, 2, 10_000)[2]) == 2  # the count still bounds
    store.close()
