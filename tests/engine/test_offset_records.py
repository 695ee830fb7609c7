"""Consumer-group offsets are OFFSET log records (issue 12): what a commit and a reset write,
that deleting or rebuilding the index keeps them, that retention never deletes the latest
record of a live offset, and the one-time upgrade of an index that held them alone."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

import fmq
from fmq.admin.rebuild_index import rebuild_index
from fmq.datadir import INDEX_DIR, LOG_DIR
from fmq.index import keys as K
from fmq.index.lmdb_env import OFFSETS_IN_LOG
from fmq.index.store import IndexStore
from fmq.log.record import NONE, RecordType
from fmq.log.scanner import LogScanner


def config(**kw) -> fmq.BrokerConfig:
    base = dict(segment_size=16 * 1024, max_message_size=4096, queues_per_topic=4,
                checkpoint_interval_ms=0, retention_interval_ms=0)
    base.update(kw)
    return fmq.BrokerConfig(**base)


def offset_records(path) -> list:
    return [r for r in LogScanner(os.path.join(str(path), LOG_DIR))
            if r.type == RecordType.OFFSET]


def fill(b: fmq.Broker, per_queue: int = 10, size: int = 100) -> None:
    for q in range(4):
        b.send_batch([fmq.Message("t", b"m" * size, queue_id=q) for _ in range(per_queue)])


def test_a_commit_is_one_offset_record_and_a_reset_one_batch_of_them(tmp_path):
    with fmq.Broker.open(str(tmp_path), config()) as b:
        fill(b)
        flushes = b._log.flush_count
        b.offsets.commit("g", [("t", 2, 7)])
        assert b._log.flush_count == flushes + 1
        assert b.reads.committed_offset("g", "t", 2) == 7  # readable as soon as it returns
        flushes = b._log.flush_count
        changes = b.inventory.reset_offsets("g", "t", None, "offset", 3)
        assert b._log.flush_count == flushes + 1  # four queues, one group commit
        assert [c["new"] for c in changes] == [3, 3, 3, 3]
        assert b._index.consumer_offsets() == {("g", "t", q): 3 for q in range(4)}
        with pytest.raises(fmq.OffsetOutOfRange):
            b.offsets.commit("g", [("t", 0, 11)])  # past the queue's end: nothing written
    recs = offset_records(tmp_path)
    assert [(r.producer_group, r.topic, r.queue_id, r.queue_offset, r.ref_offset)
            for r in recs] == [("g", "t", 2, 7, NONE)] + [("g", "t", q, 3, NONE)
                                                         for q in range(4)]
    reset = recs[1:]
    assert all(a.end_offset == b.log_offset for a, b in zip(reset, reset[1:], strict=False))


def test_deleting_the_index_or_rebuilding_it_keeps_the_offsets(tmp_path):
    with fmq.Broker.open(str(tmp_path), config()) as b:
        fill(b)
        for i in range(30):
            b.offsets.commit(f"g{i % 3}", [("t", i % 4, 1 + i // 4)])
        before, online = b._index.consumer_offsets(), b._index.dump()
    assert len(before) == 12
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert b.recovery.index_rebuilt
        assert b._index.consumer_offsets() == before
        assert b._index.dump() == online
    rebuild_index(str(tmp_path), config())
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert b._index.consumer_offsets() == before and b._index.dump() == online


def test_retention_writes_live_offsets_again_before_deleting_their_segment(tmp_path):
    with fmq.Broker.open(str(tmp_path), config()) as b:
        fill(b, per_queue=5)
        b.offsets.commit("early", [("t", 0, 5)])
        b.offsets.commit("early", [("t", 1, 2)])
        b.offsets.commit("early", [("t", 1, 4)])  # the record retention must keep is this one
        first = offset_records(tmp_path)
        for _ in range(6):  # several segments of messages after them
            fill(b, per_queue=10, size=400)
        b.offsets.commit("late", [("t", 3, 9)])
        b.wait_indexed()
    limit = 3 * 16 * 1024
    with fmq.Broker.open(str(tmp_path), config(retention_bytes=limit)) as b:
        deleted = b.enforce_retention()
        assert deleted and b._log.first_offset > max(r.log_offset for r in first)
        assert b.offsets.copies == 2 == b.stats()["offset_copies"]
        expected = {("early", "t", 0): 5, ("early", "t", 1): 4, ("late", "t", 3): 9}
        assert b._index.consumer_offsets() == expected
        sources = b._index.consumer_offset_sources()
        assert all(src >= b._log.first_offset for _off, src in sources.values())
        assert b.enforce_retention() == [] and b.offsets.copies == 2  # nothing more to copy
        b.offsets.commit("early", [("t", 0, 8)])  # a later commit wins over the copy
    copies = [r for r in offset_records(tmp_path) if r.ref_offset != NONE]
    assert sorted(r.ref_offset for r in copies) == sorted(
        r.log_offset for r in first if not (r.queue_id == 1 and r.queue_offset == 2))
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert b._index.consumer_offsets() == {**expected, ("early", "t", 0): 8}


def _old_index(path, offsets: dict) -> None:
    """Make the index what the code before OFFSET records left: the offsets stored only in
    LMDB as 8-byte values, no ``offsets-in-log`` mark."""
    store = IndexStore(os.path.join(str(path), INDEX_DIR))
    with store.env.begin(write=True) as txn:
        for (group, topic, qid), off in offsets.items():
            txn.put(K.consumer_key(group, topic, qid), K.I64.pack(off), db=store.db.consumers)
        txn.delete(OFFSETS_IN_LOG, db=store.db.meta)
    store.close()


def test_an_old_index_has_its_offsets_written_to_the_log_once(tmp_path):
    with fmq.Broker.open(str(tmp_path), config()) as b:
        fill(b)
    old = {("g", "t", 0): 4, ("g", "t", 3): 10, ("other", "t", 1): 0}
    _old_index(tmp_path, old)
    assert offset_records(tmp_path) == []
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert b._index.consumer_offsets() == old and b._index.offsets_in_log()
    written = offset_records(tmp_path)
    assert sorted((r.producer_group, r.topic, r.queue_id, r.queue_offset) for r in written) \
        == sorted((*k, v) for k, v in old.items())
    with fmq.Broker.open(str(tmp_path), config()) as b:  # once: nothing more written
        assert b._index.consumer_offsets() == old
    assert len(offset_records(tmp_path)) == len(old)
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert b._index.consumer_offsets() == old


def test_rebuilding_an_old_index_keeps_its_offsets_and_the_next_open_logs_them(tmp_path):
    with fmq.Broker.open(str(tmp_path), config()) as b:
        fill(b)
    old = {("g", "t", 2): 6}
    _old_index(tmp_path, old)
    rebuild_index(str(tmp_path), config())  # opens the broker: the upgrade runs there
    assert [(r.producer_group, r.queue_id, r.queue_offset) for r in offset_records(tmp_path)] \
        == [("g", 2, 6)]
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert b._index.consumer_offsets() == old


def test_retention_copies_never_undo_a_commit_made_meanwhile(tmp_path):
    """Flush mode async, a consumer committing the offsets retention copies while it runs,
    and an unsynced send in the log: retention finishes, and the last commit wins."""
    cfg = config(flush_mode="async", flush_interval_ms=10_000)
    with fmq.Broker.open(str(tmp_path), cfg) as b:
        fill(b, per_queue=40)
        for q in range(4):
            b.offsets.commit("g", [("t", q, 1)])
        for _ in range(6):
            fill(b, per_queue=10, size=400)
        b.wait_indexed()
    with fmq.Broker.open(str(tmp_path), config(flush_mode="async", flush_interval_ms=10_000,
                                               retention_bytes=3 * 16 * 1024)) as b:
        b.send(fmq.Message("t", b"unsynced", queue_id=0))  # written, not fdatasync'd
        stop = threading.Event()
        last: dict[int, int] = {}

        def consume() -> None:
            n = 2
            while not stop.is_set() and n <= 40:
                for q in range(4):
                    b.offsets.commit("g", [("t", q, n)])
                    last[q] = n
                n += 1

        t = threading.Thread(target=consume)
        t.start()
        try:
            assert b.enforce_retention()
        finally:
            stop.set()
            t.join(30)
        assert b._index.consumer_offsets() == {("g", "t", q): last[q] for q in range(4)}
        sources = b._index.consumer_offset_sources().values()
        assert all(src >= b._log.first_offset for _off, src in sources)
