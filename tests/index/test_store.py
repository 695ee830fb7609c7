"""The LMDB store: map growth and the derived/non-derived split."""

from __future__ import annotations

import errno
import subprocess
import sys

import lmdb
import pytest

from fmq.errors import BadRecord, IndexCorrupt
from fmq.index.entries import OffsetEntry, QueueEntry, TxEnd
from fmq.index.lmdb_env import is_transient
from fmq.index.store import IndexStore


def entries(start: int, n: int) -> list[QueueEntry]:
    return [QueueEntry("topic", i % 4, i // 4, i * 100, 100, 0, 1000 + i, f"key-{i}" * 8, i * 100)
            for i in range(start, start + n)]


def test_map_grown_by_another_process_is_adopted(tmp_path):
    # The indexer process (index_writer "process") grows the map the broker reads and
    # writes too: the broker's next transaction must take the new size, not fail.
    store = IndexStore(str(tmp_path), map_size=1 << 20)
    store.apply(entries(0, 10), 1_000)
    grow = ("import sys\n"
            "from fmq.index.store import IndexStore\n"
            "from tests.index.test_store import entries\n"
            "other = IndexStore(sys.argv[1], map_size=1 << 20)\n"
            "other.apply(entries(10, 20_000), 2_000_000)\n"
            "assert other.env.info()['map_size'] > 1 << 20\n"
            "other.close()\n")
    subprocess.run([sys.executable, "-c", grow, str(tmp_path)], check=True, timeout=120)
    assert store.applied_offset() == 2_000_000  # a read sees the other process's writes
    assert sum(store.queue_range("topic", q)[1] for q in range(4)) == 20_010
    store.apply(entries(20_010, 10), 2_000_100)  # and so does a write
    assert store.applied_offset() == 2_000_100
    store.close()


def test_map_full_grows_the_map_and_loses_nothing(tmp_path):
    store = IndexStore(str(tmp_path), map_size=1 << 20)  # 1 MiB: far too small
    before = store.env.info()["map_size"]
    for batch in range(20):
        store.apply(entries(batch * 1000, 1000), (batch + 1) * 100_000,
                    [TxEnd(f"tx-{batch}", "g", True, batch)])
    assert store.env.info()["map_size"] > before
    assert store.applied_offset() == 2_000_000
    assert sum(store.queue_range("topic", q)[1] for q in range(4)) == 20_000
    assert len(store.key_lookup("topic", "key-19999" * 8)) == 1
    assert store.tx_ends.get("g", "tx-7") == (True, 7)
    assert store.tx_ends.get("other", "tx-7") is None
    assert store.tx_ends.groups("tx-7") == ["g"]
    store.close()


def test_clear_derived_clears_consumer_offsets_only_when_they_are_in_the_log(tmp_path):
    store = IndexStore(str(tmp_path))
    assert store.offsets_in_log()  # a new index derives them from OFFSET records
    store.apply(entries(0, 10), 1000, [OffsetEntry("g", "topic", 1, 5, 900)])
    assert store.committed_offset("g", "topic", 1) == 5
    store.clear_derived()
    assert store.applied_offset() is None and store.queue_range("topic", 0) == (0, 0)
    assert store.committed_offset("g", "topic", 1) is None
    # An index from before offsets were log records: only it knows them, a clear keeps them.
    store.put_consumer_offsets({("g", "topic", 2): (8, -1)}, in_log=False)
    assert not store.offsets_in_log()
    store.clear_derived()
    assert store.consumer_offset_sources() == {("g", "topic", 2): (8, -1)}
    store.close()


def test_later_offset_records_win_and_a_cut_removes_those_past_it(tmp_path):
    store = IndexStore(str(tmp_path))
    store.apply([], 300, [OffsetEntry("g", "t", 0, 4, 100), OffsetEntry("g", "t", 0, 9, 200),
                          OffsetEntry("h", "t", 0, 1, 250)])
    assert store.consumer_offset_sources() == {("g", "t", 0): (9, 200), ("h", "t", 0): (1, 250)}
    store.remove_from(250)
    assert store.consumer_offsets() == {("g", "t", 0): 9}
    store.close()


def test_apply_is_idempotent(tmp_path):
    store = IndexStore(str(tmp_path))
    store.apply(entries(0, 50), 5000)
    once = store.dump()
    store.apply(entries(0, 50), 5000)
    store.apply(entries(10, 20), 3000)  # replaying an older range changes nothing
    assert store.dump() == once
    store.close()


def test_a_foreign_lmdb_is_refused(tmp_path):
    env = lmdb.open(str(tmp_path), max_dbs=10)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"format", b"something-else", db=meta)
    env.close()
    with pytest.raises(IndexCorrupt, match="format"):
        IndexStore(str(tmp_path))


def test_only_errors_a_retry_can_get_past_are_transient():
    for exc in (lmdb.DiskError("mdb_txn_commit", errno.ENOSPC),
                lmdb.Error("mdb_txn_commit", errno.EIO),
                lmdb.ReadersFullError("mdb_txn_begin", 0),
                OSError(errno.EIO, "Input/output error")):
        assert is_transient(exc), exc
    for exc in (lmdb.CorruptedError("mdb_get", 0), lmdb.PanicError("mdb_txn_begin", 0),
                lmdb.BadValsizeError("mdb_put", 0), IndexCorrupt("stored 1 of 2"),
                BadRecord(0, "crc"), TypeError("a bug")):
        assert not is_transient(exc), exc


def test_queue_read_is_the_range_and_the_entries_in_one_transaction(tmp_path):
    # A pull's read of the index (fmq.engine.reads): the range, then up to `limit`
    # entries from max(start, min offset) below the next offset, as the two separate
    # reads give them, but in one read transaction instead of two.
    store = IndexStore(str(tmp_path))
    store.apply(entries(0, 40), 4_000)  # 10 entries in each of 4 queues
    for qid in (0, 3, 7):  # queue 7 holds nothing
        lo, hi = store.queue_range("topic", qid)
        for start in range(0, hi + 3):
            for limit in (1, 3, 10, 50):
                got = store.queue_read("topic", qid, start, limit)
                begin = max(start, lo)
                want = (store.queue_entries("topic", qid, begin, min(limit, hi - begin))
                        if hi > begin else [])
                assert got == (lo, hi, want), (qid, start, limit)
    begun = []
    env = store.env

    class Counting:
        def begin(self, **kwargs):
            begun.append(kwargs)
            return env.begin(**kwargs)

        def __getattr__(self, name):
            return getattr(env, name)

    store.env = Counting()
    assert store.queue_read("topic", 1, 2, 5)[2][0][0] == 2
    assert len(begun) == 1
    store.env = env
    store.close()
