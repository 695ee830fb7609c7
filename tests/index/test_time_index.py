"""The sparse time index: a ``time`` item every ``TIME_EVERY`` queue offsets, lookups by time
that give the first entry stored at or after the time as an item per entry did, trims that
keep it as a rebuild would make it, and an index of the format with an item per entry
rebuilt when opened."""

from __future__ import annotations

import random

import pytest

import fmq
from fmq import Message
from fmq.index import keys as K
from fmq.index.entries import QueueEntry
from fmq.index.lmdb_env import FORMAT
from fmq.index.store import IndexStore

EVERY = K.TIME_EVERY


def queue(topic: str, qid: int, times: list[int], first: int = 0) -> list[QueueEntry]:
    """Entries of one queue from queue offset ``first``, stored at ``times``."""
    return [QueueEntry(topic, qid, first + i, 1000 * (first + i), 100, 0, t, None,
                       1000 * (first + i)) for i, t in enumerate(times)]


def first_at_or_after(entries: list[QueueEntry], t: int) -> int | None:
    """The answer by brute force: the lowest queue offset stored at or after ``t``."""
    return min((e.queue_offset for e in entries if max(e.store_time, 0) >= t), default=None)


def growing_times(n: int, seed: int) -> list[int]:
    """Store times that never fall, in runs of equal ones (messages placed together), with
    gaps, starting below zero (a clock before the epoch counts as 0)."""
    rng = random.Random(seed)
    t, out = -3, []
    while len(out) < n:
        out += [t] * rng.choice([1, 1, 2, 5, 40])
        t += rng.choice([1, 1, 3, 250])
    return out[:n]


def test_only_every_nth_queue_offset_has_a_time_item(tmp_path):
    with fmq.Broker.open(str(tmp_path / "data"), fmq.BrokerConfig(queues_per_topic=2)) as b:
        b.send_batch([Message("t", b"x", key=f"k{i}" if i % 3 == 0 else None)
                      for i in range(200)])
        for _i in range(50):
            b.send(Message("t", b"y"))
        b.wait_indexed()
        dump = b._index.dump()
        ranges = {q: b.reads.queue_range("t", q) for q in range(2)}
    expected = sorted((q, qoff) for q, (lo, hi) in ranges.items() for qoff in range(lo, hi)
                      if qoff % EVERY == 0)
    got = sorted((qid, qoff) for qid, _t, qoff in
                 (K.QID_TIME_QOFF.unpack_from(k, k.index(0) + 1) for k, _v in dump["time"]))
    assert got == expected
    assert len(dump["cq"]) == 250
    assert len(dump["keys"]) == len(dump["keyoff"]) == 67  # only the keyed messages


@pytest.mark.parametrize("seed", range(4))
def test_a_lookup_gives_the_first_entry_stored_at_or_after_the_time(tmp_path, seed):
    store = IndexStore(str(tmp_path))
    n = 5 * EVERY + 7
    entries = queue("t", 3, growing_times(n, seed))
    for start in range(0, n, 37):  # transactions of any size
        store.apply(entries[start:start + 37], 1000 * (start + 37))
    times = sorted({max(e.store_time, 0) for e in entries})
    probes = {0, times[-1] + 1, 10**15} | {t + d for t in times for d in (-1, 0, 1)}
    for t in sorted(p for p in probes if p >= 0):
        assert store.offset_for_time("t", 3, t) == first_at_or_after(entries, t), t
    assert store.offset_for_time("t", 2, 0) is None  # another queue, empty
    assert store.offset_for_time("u", 3, 0) is None
    store.close()


@pytest.mark.parametrize("cut", [1, EVERY - 1, EVERY, EVERY + 1, 3 * EVERY + 5])
def test_a_lookup_after_a_trim_reads_only_what_is_left(tmp_path, cut):
    store = IndexStore(str(tmp_path))
    entries = queue("t", 0, growing_times(4 * EVERY + 3, cut))
    store.apply(entries, 10**9)
    store.remove_before(entries[cut].data_offset)  # retention: the log before is gone
    left = entries[cut:]
    assert store.queue_range("t", 0) == (cut, len(entries))
    for t in sorted({max(e.store_time, 0) + d for e in entries for d in (-1, 0, 1)}):
        if t >= 0:
            assert store.offset_for_time("t", 0, t) == first_at_or_after(left, t), t
    store.close()


def test_trims_leave_the_index_a_rebuild_of_what_is_left_makes(tmp_path):
    entries = queue("t", 0, growing_times(6 * EVERY, 7))
    live = IndexStore(str(tmp_path / "live"))
    live.apply(entries, 10**9)
    low, high = EVERY + 3, 5 * EVERY - 2
    live.remove_before(entries[low].data_offset)
    live.remove_from(entries[high].source_offset)  # a cut log
    live.raise_topic_floors("t", {0: low + 4})
    rebuilt = IndexStore(str(tmp_path / "rebuilt"))
    rebuilt.apply(entries[low + 4:high], 10**9)
    got, want = live.dump(), rebuilt.dump()
    assert got["time"] == want["time"] and got["cq"] == want["cq"]
    assert [K.split_time_key(k)[1] for k, _v in got["time"]] == [
        q for q in range(low + 4, high) if q % EVERY == 0]
    live.close()
    rebuilt.close()


def test_an_index_with_a_time_item_per_entry_is_rebuilt_when_opened(tmp_path):
    path = str(tmp_path / "data")
    cfg = fmq.BrokerConfig(queues_per_topic=1)
    with fmq.Broker.open(path, cfg) as b:
        b.send_batch([Message("t", b"x") for _ in range(3 * EVERY)])
    index = IndexStore(f"{path}/index")
    with index.env.begin(write=True) as txn:  # what an index of the earlier format held
        txn.put(FORMAT, b"fmq-index-2", db=index.db.meta)
        for k, v in list(txn.cursor(db=index.db.cq)):
            _topic, qid, qoff = K.split_cq_key(k)
            txn.put(K.time_key("t", qid, K.CQ_VALUE.unpack(v)[3], qoff), b"", db=index.db.time)
    assert len(index.dump()["time"]) == 3 * EVERY
    index.close()
    with fmq.Broker.open(path, cfg) as b:
        assert b.recovery.index_rebuilt
        assert len(b._index.dump()["time"]) == 3
        assert b.reads.queue_range("t", 0) == (0, 3 * EVERY)
        assert b.reads.offset_for_time("t", 0, 0) == 0
