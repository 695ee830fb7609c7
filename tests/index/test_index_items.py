"""One classification of a record for the index (``index_items``), and the three paths that
use it (the dispatcher's hand-off, its catch-up from the log, recovery's redo) building the
same index from a log holding every kind of record."""

from __future__ import annotations

import shutil
import time

import pytest

import fmq
from fmq.datadir import INDEX_DIR
from fmq.index.entries import (
    EpochEntry,
    OffsetEntry,
    QueueEntry,
    TimerEntry,
    TimerFired,
    TxEnd,
    index_items,
    sort_items,
)
from fmq.log.placement import now_ms
from fmq.log.record import Record, RecordType

T = RecordType


def _records() -> list[tuple[str, Record, list[type]]]:
    """Every record type (and both shapes of MESSAGE and TIMER) with the kinds of item it
    must put into the index, in order."""
    common = dict(log_offset=4096, size=120, store_time=7, topic="t", queue_id=1,
                  queue_offset=5, tags="a", key="k")
    return [
        ("message", Record(T.MESSAGE, **common), [QueueEntry]),
        ("delivery", Record(T.MESSAGE, ref_offset=64, **common), [QueueEntry, TimerFired]),
        ("prepare", Record(T.PREPARE, tx_id="x", producer_group="g", ref_size=1), []),
        ("pre_message", Record(T.PRE_MESSAGE, tx_id="x", producer_group="g", topic="t"), []),
        ("ref", Record(T.REF_MESSAGE, ref_offset=64, ref_size=90, **common), [QueueEntry]),
        ("tx", Record(T.TX_MESSAGE, ref_offset=64, ref_size=90, **common), [QueueEntry]),
        ("commit", Record(T.COMMIT, tx_id="x", producer_group="g", ref_offset=0), [TxEnd]),
        ("rollback", Record(T.ROLLBACK, tx_id="x", producer_group="g"), [TxEnd]),
        ("offset", Record(T.OFFSET, producer_group="g", topic="t", queue_id=1,
                          queue_offset=9), [OffsetEntry]),
        ("epoch", Record(T.EPOCH, queue_offset=3, producer_group="n1"), [EpochEntry]),
        ("timer", Record(T.TIMER, log_offset=4096, size=100, queue_offset=10**13, topic="t"),
         [TimerEntry]),
        ("relocated timer", Record(T.TIMER, log_offset=4096, size=100, queue_offset=10**13,
                                   topic="t", ref_offset=64), [TimerFired, TimerEntry]),
        ("filler", Record(T.FILLER, log_offset=4096, size=72), []),
    ]


@pytest.mark.parametrize("name,record,kinds", _records(), ids=[r[0] for r in _records()])
def test_every_record_type_is_classified_once(name, record, kinds):
    items = index_items(record)
    assert [type(i) for i in items] == kinds
    entries, marks, timers = [], [], []
    sort_items(items, entries, marks, timers)
    assert entries == [i for i in items if isinstance(i, QueueEntry)]
    assert timers == [i for i in items if isinstance(i, (TimerEntry, TimerFired))]
    assert marks == [i for i in items if isinstance(i, (TxEnd, OffsetEntry, EpochEntry))]


def test_a_ref_entry_points_at_its_pre_message_and_a_delivery_names_its_timer():
    [entry] = index_items(Record(T.REF_MESSAGE, log_offset=500, size=80, topic="t",
                                 queue_id=0, queue_offset=2, ref_offset=64, ref_size=90))
    assert (entry.data_offset, entry.data_size, entry.source_offset) == (64, 90, 500)
    _, fired = index_items(Record(T.MESSAGE, log_offset=500, size=80, topic="t",
                                  ref_offset=64))
    assert fired == TimerFired(64)


def _config(**kw) -> fmq.BrokerConfig:
    base = dict(segment_size=16 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
                retention_interval_ms=0, timer_poll_ms=10)
    base.update(kw)
    return fmq.BrokerConfig(**base)


def _every_kind(b: fmq.Broker) -> None:
    """Sends, transactions committed and rolled back, a pending and a delivered timer, and
    consumer offsets: every record type the index takes something from."""
    for i in range(40):
        b.send(fmq.Message("t", b"m%d" % i * 20, key=f"k{i % 5}", tags="a" if i % 2 else None))
        if i % 8 == 0:
            tx = b.transactions.prepare([fmq.Message("t", b"tx%d" % i * 30)], "g")
            (b.transactions.commit if i % 16 else b.transactions.rollback)(tx)
    b._timers.schedule([fmq.Message("t", b"later")], now_ms() + 3_600_000)
    b._timers.schedule([fmq.Message("t", b"due")], now_ms())
    b.offsets.commit("billing", [("t", 0, 3)])
    deadline = time.monotonic() + 30
    while not any(m.body == b"due" for v in b.reads.all_messages(["t"]).values() for m in v):
        assert time.monotonic() < deadline, "the due timer was never delivered"
        time.sleep(0.02)
    assert b.wait_indexed()


@pytest.mark.parametrize("max_pending", [200_000, 2], ids=["hand-off", "catch-up"])
def test_both_dispatcher_paths_and_recovery_build_the_same_index(tmp_path, max_pending):
    with fmq.Broker.open(str(tmp_path), _config(dispatch_max_pending=max_pending,
                                                dispatch_batch=5)) as b:
        _every_kind(b)
        fell_back = b._dispatcher._generation > 0
        online = b._index.dump()
    assert fell_back == (max_pending == 2)  # the path named really ran
    shutil.rmtree(tmp_path / INDEX_DIR)
    with fmq.Broker.open(str(tmp_path), _config()) as b:  # recovery's redo rebuilds it
        assert b._index.dump() == online
