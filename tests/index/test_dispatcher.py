"""The dispatcher indexes only flushed records, through either of its two paths."""

from __future__ import annotations

import shutil
import threading

import pytest

import fmq
from fmq.datadir import INDEX_DIR


def config(**kw):
    base = dict(segment_size=16 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
                retention_interval_ms=0)
    base.update(kw)
    return fmq.BrokerConfig(**base)


def load(b: fmq.Broker, threads: int = 4, per_thread: int = 150) -> None:
    def worker(n):
        for i in range(per_thread):
            if i % 10 == 0:
                tx = b.transactions.prepare([fmq.Message("t", f"tx{n}-{i}".encode() * 30,
                                                         key=f"k{i}")], "g")
                (b.transactions.commit if i % 20 else b.transactions.rollback)(tx)
            else:
                b.send(fmq.Message("t", f"m{n}-{i}".encode() * 10, key=f"k{i % 7}"))

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def test_overflowing_hand_off_falls_back_to_reading_the_log(tmp_path):
    # A tiny hand-off queue overflows all the time: the index must still equal a rebuild.
    with fmq.Broker.open(str(tmp_path), config(dispatch_max_pending=3, dispatch_batch=7)) as b:
        load(b)
        assert b.wait_indexed()
        generations = b._dispatcher._generation
        online = b._index.dump()
        visible = sorted(m.body for v in b.reads.all_messages(["t"]).values() for m in v)
    assert generations > 0  # the fallback path really ran
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert b._index.dump() == online
        assert sorted(m.body for v in b.reads.all_messages(["t"]).values() for m in v) == visible


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_hand_off_index_equals_a_rebuild(tmp_path, writer):
    with fmq.Broker.open(str(tmp_path), config(index_writer=writer)) as b:
        load(b)
        assert b.wait_indexed()
        if writer == "thread":
            assert b._dispatcher._generation == 0  # never fell back
        online = b._index.dump()
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert b._index.dump() == online


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_nothing_unflushed_is_indexed(tmp_path, writer):
    cfg = config(flush_mode="async", flush_interval_ms=60_000,  # no background flush
                 index_writer=writer)
    with fmq.Broker.open(str(tmp_path), cfg) as b:
        r = b.send(fmq.Message("t", b"not yet durable", queue_id=0))
        assert b.stats()["flushed_offset"] <= r.offset
        assert not b._dispatcher.wait_applied(r.offset + 1, timeout=0.3)
        assert b.reads.pull("t", 0, 0) == []  # written to the OS, but not consumable
        b._log.flush()
        assert b.wait_indexed()
        assert b.reads.pull("t", 0, 0)[0].body == b"not yet durable"
