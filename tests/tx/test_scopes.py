"""Transaction scopes (docs/transactions.md, *Scopes*), embedded broker on a real log and
LMDB: once the transaction ``SCOPE`` is prepared, a PREPARE of ``SCOPE//NAME`` in the same
producer group is refused with ``TransactionScopeClosed``, across a restart and with the
finished-id memory off (the index answers, once it holds the mark's end); transactions of the scope prepared before the
mark stay as they were until their owner ends them or the check-back finds them (it rolls
them back instead of asking: embedded, and a real server killed with SIGKILL before its
owner's sweep); other groups and other scopes are not touched."""

from __future__ import annotations

import json
import time

import pytest

import fmq
from fmq import Message, TxState
from fmq.client import Client, Consumer, TransactionProducer
from fmq.errors import TransactionConflict, TransactionScopeClosed
from fmq.protocol import Op
from fmq.tx.ids import scope_of
from tests.server.harness import ServerProcess, broker_stats, wait_until

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


def _offered_until(b: fmq.Broker, group: str, done, limit: float = 20.0) -> set[str]:
    """Poll ``group``'s check-back (answering nothing) until ``done(offered ids)`` holds;
    the ids it was offered. Fails after ``limit`` seconds."""
    offered: set[str] = set()
    deadline = time.monotonic() + limit
    while not done(offered):
        assert time.monotonic() < deadline, f"offered so far: {offered}"
        for u in b.transactions.poll_uncertain(group, max_items=100, lease_ms=50, wait_ms=100):
            offered.add(u.tx_id)
    return offered


@pytest.mark.parametrize("mark", ["ended", "open"])
def test_the_check_back_rolls_back_what_a_closed_scope_left_open(tmp_path, mark):
    """The owner closed the scope and never ended what it had prepared before (its sweep
    did not run): once due for a check-back, those are rolled back by the broker instead
    of being offered; a transaction of an open scope is offered as before."""
    cfg = fmq.BrokerConfig(**CFG, tx_check_after_ms=200)
    with fmq.Broker.open(str(tmp_path / "data"), cfg) as b:
        tx = b.transactions
        tx.prepare([Message("t", b"a")], "g", tx_id="s//a")
        tx.prepare([Message("t", b"b")], "g", tx_id="s//b")
        tx.prepare([Message("t", b"other")], "g", tx_id="o//c")
        tx.prepare([Message("t", b"h")], "h", tx_id="s//a")  # another group's scope s
        tx.prepare([Message("t", b"mark")], "g", tx_id="s")
        if mark == "ended":
            tx.rollback("s", "g")
        offered = _offered_until(b, "g", lambda seen: "o//c" in seen and not {
            t["tx_id"] for t in tx.open_transactions() if t["producer_group"] == "g"
        } & {"s//a", "s//b"})
        assert not offered & {"s//a", "s//b"}, offered
        for tx_id in ("s//a", "s//b"):
            with pytest.raises(TransactionConflict, match="rollback"):
                tx.commit(tx_id, "g")
        assert b.stats()["tx_closed_scope_rollbacks"] == 2
        expected = {("g", "o//c"), ("h", "s//a")} | ({("g", "s")} if mark == "open" else set())
        assert {(t["producer_group"], t["tx_id"]) for t in tx.open_transactions()} == expected
        assert tx.commit("s//a", "h") == TxState.COMMIT
        assert b.wait_indexed()
        got = sorted(m.body for msgs in b.reads.all_messages(["t"]).values() for m in msgs)
        assert got == [b"h"]


#: The server of the SIGKILL test: nobody is asked before the kill, soon after the restart.
NEVER_ASKED = {"tx_check_after_ms": 600_000, "checkpoint_interval_ms": 0}
SOON_ASKED = {"tx_check_after_ms": 500, "tx_check_max_interval_ms": 1000,
              "checkpoint_interval_ms": 0}


def _open_ids(address: str) -> set[str]:
    with Client(address) as c:
        return {t["tx_id"] for t in c.call(Op.LIST_TX, {})["transactions"]}


def _consumed(address: str, group: str, limit: float = 30.0) -> list[bytes]:
    """The bodies of topic ``scoped`` a new consumer group reads, once 1 s passed idle."""
    got: list[bytes] = []
    with Consumer(address, group, "scoped", start="earliest") as c:
        deadline = time.monotonic() + limit
        last = time.monotonic()
        while time.monotonic() - last < 1.0 and time.monotonic() < deadline:
            batch = c.poll(0.3)
            if batch:
                got.extend(bytes(m.body) for m in batch)
                last = time.monotonic()
    return got


@pytest.mark.timeout(180)
def test_a_killed_server_rolls_back_a_closed_scopes_leftovers_on_its_own(tmp_path):
    """``S//a`` and ``S//b`` prepared, the scope closed by its mark, the server killed
    with SIGKILL before anyone ended them (the owner's sweep never runs), started again:
    with no further request but a producer's check-back poll, the broker rolls them back
    within its check-back interval (durably: after a second SIGKILL they are still rolled
    back), never delivers them, and asks the producer about ``O//c`` (open scope) only."""
    srv = ServerProcess(str(tmp_path / "data"), NEVER_ASKED)
    try:
        srv.start()
        with TransactionProducer(srv.address, "g", lambda u: TxState.UNKNOWN,
                                 feedback=False) as p:
            for tx_id in ("S//a", "S//b", "O//c"):
                p.prepare([Message("scoped", tx_id.encode())], tx_id=tx_id)
            p.prepare([Message("scoped", b"mark")], tx_id="S")
            assert p.rollback("S") == TxState.ROLLBACK  # as the Spark sink's driver does
        assert _open_ids(srv.address) == {"S//a", "S//b", "O//c"}
        srv.kill()
        with open(srv.config_path, "w") as f:
            json.dump(SOON_ASKED, f)
        srv.start()
        asked: list[str] = []

        def checker(u: fmq.UncertainTx) -> TxState:
            asked.append(u.tx_id)
            return TxState.UNKNOWN

        with TransactionProducer(srv.address, "g", checker, feedback_interval=0.1) as p:
            wait_until(lambda: not _open_ids(srv.address) & {"S//a", "S//b"}, 30,
                       "the closed scope's leftovers to be rolled back")
            wait_until(lambda: "O//c" in asked, 30, "the check-back of O//c")
        assert not {"S//a", "S//b"} & set(asked), asked
        assert _open_ids(srv.address) == {"O//c"}
        assert broker_stats(srv.address)["tx_closed_scope_rollbacks"] == 2
        assert "scope 'S' of producer group 'g' is closed" in srv.log()
        assert _consumed(srv.address, "before") == []
        srv.kill()  # the rollbacks are in the log: a second crash keeps them
        srv.start()
        with TransactionProducer(srv.address, "g", lambda u: TxState.UNKNOWN,
                                 feedback=False) as p:
            for tx_id in ("S//a", "S//b"):
                with pytest.raises(TransactionConflict):
                    p.commit(tx_id)
            assert p.commit("O//c") == TxState.COMMIT
        assert _open_ids(srv.address) == set()
        assert _consumed(srv.address, "after") == [b"O//c"]
    finally:
        srv.kill()
