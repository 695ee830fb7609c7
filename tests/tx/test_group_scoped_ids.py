"""Transaction ids are scoped to their producer group (embedded broker, real log and
LMDB): the same id in two groups is two transactions across a restart, and the data of
earlier versions (REF records without the group, an index keyed by id alone) still
recovers."""

from __future__ import annotations

import pytest

import fmq
from fmq import Message, TxState
from fmq.index.lmdb_env import FORMAT
from fmq.index.store import IndexStore
from fmq.log.placement import now_ms
from fmq.log.record import Record, RecordType

CFG = dict(segment_size=64 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
           retention_interval_ms=0)


def bodies(b: fmq.Broker) -> list[bytes]:
    assert b.wait_indexed()
    return sorted(m.body for msgs in b.reads.all_messages(["t"]).values() for m in msgs)


def test_one_id_in_two_groups_is_two_transactions_across_a_restart(tmp_path):
    path = str(tmp_path / "data")
    with fmq.Broker.open(path, fmq.BrokerConfig(**CFG)) as b:
        b.transactions.prepare([Message("t", b"from g")], "g", tx_id="order-1")
        b.transactions.prepare([Message("t", b"from h")], "h", tx_id="order-1")
        with pytest.raises(fmq.InvalidArgument, match="name the producer group"):
            b.transactions.commit("order-1")  # which one: the embedded shortcut refuses to guess
        assert b.transactions.rollback("order-1", "g") == TxState.ROLLBACK
        assert [(t["producer_group"], t["tx_id"]) for t in b.transactions.open_transactions()] == [
            ("h", "order-1")]
    with fmq.Broker.open(path, fmq.BrokerConfig(**CFG)) as b:  # redo and the index agree
        assert [(t["producer_group"], t["tx_id"]) for t in b.transactions.open_transactions()] == [
            ("h", "order-1")]
        assert b.transactions.commit("order-1", "h") == TxState.COMMIT
        assert b.transactions.rollback("order-1",
                                       "g") == TxState.ROLLBACK  # its own end, remembered
        with pytest.raises(fmq.TransactionRolledBack):
            b.transactions.prepare([Message("t", b"again")], "g", tx_id="order-1")
        with pytest.raises(fmq.UnknownTransaction):
            b.transactions.commit("order-1", "other")
        assert b.transactions.prepare([Message("t", b"from other")], "other",
                                      tx_id="order-1") == "order-1"
        assert b.transactions.commit("order-1", "other") == TxState.COMMIT
        assert bodies(b) == [b"from h", b"from other"]


def test_a_ref_record_without_its_group_from_an_older_log_is_rolled_forward(tmp_path):
    """Logs written before REF records named their group: recovery still finds the
    transaction a cut commit left COMMITTING, and rolls it forward."""
    path = str(tmp_path / "data")
    with fmq.Broker.open(path, fmq.BrokerConfig(**CFG)) as b:
        b.transactions.prepare([Message("t", b"x" * 600, key="k")], "g", tx_id="old-tx")
        [pre] = b._tx.open["g", "old-tx"].messages
        log_, queues = b._log, b._queues
        with log_.lock:  # the REF as the older writer laid it out, then a crash: no COMMIT
            qoff = queues.next_offset(pre.topic, pre.queue_id)
            log_.append_locked(Record(RecordType.REF_MESSAGE, store_time=now_ms(),
                                      queue_id=pre.queue_id, queue_offset=qoff,
                                      ref_offset=pre.offset, ref_size=pre.size,
                                      topic=pre.topic, tx_id="old-tx", key=pre.key))
            queues.advance(pre.topic, pre.queue_id, qoff, pre.body_size)
            end = log_.next_offset
        log_.wait_durable(end, sync=True)
    with fmq.Broker.open(path, fmq.BrokerConfig(**CFG)) as b:
        assert b.recovery.rolled_forward == ["old-tx"]
        assert b.transactions.open_transactions() == []
        assert b.transactions.commit("old-tx", "g") == TxState.COMMIT
        assert bodies(b) == [b"x" * 600]


def test_an_index_keyed_by_id_alone_is_rebuilt_from_the_log(tmp_path):
    path = str(tmp_path / "data")
    with fmq.Broker.open(path, fmq.BrokerConfig(**CFG)) as b:
        b.transactions.prepare([Message("t", b"done")], "g", tx_id="t-old")
        b.transactions.commit("t-old", "g")
        b.send(Message("t", b"plain"))
    index = IndexStore(f"{path}/index")
    with index.env.begin(write=True) as txn:  # what an index of the earlier format held
        txn.put(FORMAT, b"fmq-index-1", db=index.db.meta)
        for key, value in list(txn.cursor(db=index.db.txends)):
            txn.delete(key, db=index.db.txends)
            txn.put(key.split(b"\x00")[0], value, db=index.db.txends)
    index.close()
    with fmq.Broker.open(path, fmq.BrokerConfig(**CFG)) as b:
        assert b.recovery.index_rebuilt
        assert [k for k, _v in b._index.dump()["txends"]] == [b"t-old\x00g"]
        assert b.transactions.commit("t-old", "g") == TxState.COMMIT  # answered from the index
        assert bodies(b) == [b"done", b"plain"]
