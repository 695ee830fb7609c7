"""The dispatcher indexes only flushed records, through either of its two paths."""

from __future__ import annotations

import shutil
import threading

import lmdb

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
                tx = b.prepare([fmq.Message("t", f"tx{n}-{i}".encode() * 30, key=f"k{i}")], "g")
                (b.commit if i % 20 else b.rollback)(tx)
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
        generations = b.dispatcher._generation
        online = b.index.dump()
        visible = sorted(m.body for v in b.all_messages(["t"]).values() for m in v)
    assert generations > 0  # the fallback path really ran
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert b.index.dump() == online
        assert sorted(m.body for v in b.all_messages(["t"]).values() for m in v) == visible


def test_hand_off_index_equals_a_rebuild(tmp_path):
    with fmq.Broker.open(str(tmp_path), config()) as b:
        load(b)
        assert b.wait_indexed()
        assert b.dispatcher._generation == 0  # never fell back
        online = b.index.dump()
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert b.index.dump() == online


def test_nothing_unflushed_is_indexed(tmp_path):
    cfg = config(flush_mode="async", flush_interval_ms=60_000)  # no background flush
    with fmq.Broker.open(str(tmp_path), cfg) as b:
        r = b.send(fmq.Message("t", b"not yet durable", queue_id=0))
        assert b.stats()["flushed_offset"] <= r.offset
        assert not b.dispatcher.wait_applied(r.offset + 1, timeout=0.3)
        assert b.pull("t", 0, 0) == []  # written to the OS, but not consumable
        b.log.flush()
        assert b.wait_indexed()
        assert b.pull("t", 0, 0)[0].body == b"not yet durable"


# ------------------------------------------------------------- indexing in the caller's thread


def test_a_flush_left_to_the_caller_is_indexed_by_its_index_flushed_call(tmp_path):
    with fmq.Broker.open(str(tmp_path), config()) as b:
        _, end, _ = b.place_requests([fmq.Message("t", b"one", queue_id=0)], (1,))
        b.wait_durable(end, index_later=True)
        assert b.log.flushed_offset >= end
        # The flush woke no index thread: nothing is consumable until the caller prepares.
        assert not b.dispatcher.wait_applied(end, timeout=0.3)
        b.index_flushed()  # prepares the write here; the index thread writes it
        assert b.dispatcher.wait_applied(end, timeout=30)
        assert b.pull("t", 0, 0)[0].body == b"one"


def test_index_flushed_while_the_thread_applies_leaves_it_to_the_thread(tmp_path):
    with fmq.Broker.open(str(tmp_path), config()) as b:
        with b.dispatcher._dispatching:  # the thread is taking from the hand-off queue
            _, end, _ = b.place_requests([fmq.Message("t", b"two", queue_id=0)], (1,))
            b.wait_durable(end, index_later=True)
            b.index_flushed()  # cannot apply now: wakes the thread instead
            assert b.dispatcher.applied_offset < end
        assert b.dispatcher.wait_applied(end, timeout=30)
        assert b.pull("t", 0, 0)[0].body == b"two"


def test_index_flushed_never_waits_for_an_index_writer(tmp_path):
    # The server's event loop calls it: another process may hold LMDB's writer lock.
    with fmq.Broker.open(str(tmp_path), config()) as b:
        _, end, _ = b.place_requests([fmq.Message("t", b"four", queue_id=0)], (1,))
        b.wait_durable(end, index_later=True)
        with b.index._write_lock:  # another writer holds the index
            caller = threading.Thread(target=b.index_flushed)
            caller.start()
            caller.join(10)
            assert not caller.is_alive()  # it prepared the write and left it to the thread
            assert b.dispatcher.applied_offset < end
        assert b.dispatcher.wait_applied(end, timeout=30)
        assert b.pull("t", 0, 0)[0].body == b"four"


def test_a_failed_write_of_a_prepared_batch_is_retried_from_the_log(tmp_path):
    with fmq.Broker.open(str(tmp_path), config()) as b:
        real_apply = b.index.apply_prepared
        failures = []

        def apply_failing_once(*args, **kw):
            if not failures:
                failures.append(threading.current_thread().name)
                raise lmdb.Error("injected EIO")  # what an I/O error on the LMDB file raises
            return real_apply(*args, **kw)

        b.index.apply_prepared = apply_failing_once
        _, end, _ = b.place_requests([fmq.Message("t", b"three", queue_id=0)] * 3, (3,))
        b.wait_durable(end, index_later=True)
        b.index_flushed()  # the thread's write of it fails: it drops it, reads the log
        assert b.dispatcher.wait_applied(end, timeout=30)
        assert failures == ["fmq-dispatcher"] and b.dispatcher.retries == 1
        assert [m.body for m in b.pull("t", 0, 0)] == [b"three"] * 3
        assert b.wait_indexed() and b.dispatcher.error is None
        online = b.index.dump()
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), config()) as b:
        assert b.index.dump() == online
