"""Transaction scopes (docs/transactions.md, *Scopes*), embedded broker on a real log and
LMDB: once the transaction ``SCOPE`` is prepared, a PREPARE of ``SCOPE//NAME`` in the same
producer group is refused with ``TransactionScopeClosed``, across a restart and with the
finished-id memory off (the index answers, once it holds the mark's end); transactions of the scope prepared before the
mark stay as they were; other groups and other scopes are not touched."""

from __future__ import annotations

import pytest

import fmq
from fmq import Message, TxState
from fmq.errors import TransactionScopeClosed
from fmq.tx.ids import scope_of

CFG = dict(segment_size=64 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
           retention_interval_ms=0)


def test_scope_of_reads_what_precedes_the_first_separator():
    assert scope_of("write-1//3.7.0") == "write-1"
    assert scope_of("a//b//c") == "a"
    assert scope_of("plain-id") is None
    assert scope_of("//no-scope") is None
    assert scope_of("1.0.0.0.3.orders") is None  # the Kafka door's ids have none


@pytest.mark.parametrize("memory", [100_000, 0])
def test_a_prepared_mark_closes_its_scope_across_a_restart(tmp_path, memory):
    path = str(tmp_path / "data")
    cfg = fmq.BrokerConfig(**CFG, tx_finished_memory=memory)
    with fmq.Broker.open(path, cfg) as b:
        tx = b.transactions
        assert tx.prepare([Message("t", b"early")], "g", tx_id="w1//0") == "w1//0"
        tx.prepare([Message("t", b"mark")], "g", tx_id="w1")  # the end mark
        with pytest.raises(TransactionScopeClosed, match="w1//1.*scope 'w1'.*closed"):
            tx.prepare([Message("t", b"late")], "g", tx_id="w1//1")
        assert tx.rollback("w1", "g") == TxState.ROLLBACK  # an ended mark still closes
        # Without the finished-id memory the index answers, once it holds the end.
        assert b.wait_indexed()
        with pytest.raises(TransactionScopeClosed):
            tx.prepare([Message("t", b"late")], "g", tx_id="w1//2")
        # Another group's scope of the same name, and another scope, are open.
        assert tx.prepare([Message("t", b"h")], "h", tx_id="w1//1") == "w1//1"
        assert tx.prepare([Message("t", b"w2")], "g", tx_id="w2//1") == "w2//1"
        # What the scope prepared before its mark is ended as usual.
        assert tx.commit("w1//0", "g") == TxState.COMMIT
    with fmq.Broker.open(path, cfg) as b:  # redo and the index keep the mark
        tx = b.transactions
        with pytest.raises(TransactionScopeClosed):
            tx.prepare([Message("t", b"after restart")], "g", tx_id="w1//3")
        assert {(t["producer_group"], t["tx_id"]) for t in tx.open_transactions()} == {
            ("h", "w1//1"), ("g", "w2//1")}
        assert b.wait_indexed()
        got = sorted(m.body for msgs in b.reads.all_messages(["t"]).values() for m in msgs)
        assert got == [b"early"]


def test_a_retried_prepare_of_the_scope_is_answered_after_the_mark(tmp_path):
    """A PREPARE stored before the mark and retried after it (its answer was lost) is
    answered from the first attempt, not refused: it is stored, and whoever closed the
    scope finds it open."""
    with fmq.Broker.open(str(tmp_path / "data"), fmq.BrokerConfig(**CFG)) as b:
        tx = b.transactions
        tx.prepare([Message("t", b"once")], "g", tx_id="w//0")
        tx.prepare([Message("t", b"mark")], "g", tx_id="w")
        assert tx.prepare([Message("t", b"once")], "g", tx_id="w//0") == "w//0"
        assert tx.rollback("w//0", "g") == TxState.ROLLBACK
