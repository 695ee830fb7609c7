"""A scope's decision mark (docs/transactions.md, *Scopes*; :mod:`fmq.tx.scope_decision`):
the mark ``S`` prepared before the owner's first COMMIT, naming the winners of the scope.
From then on the winners are committed whatever happens to the owner: the broker refuses
to roll one back, never offers one (nor the mark) to the check-back, and commits those
its owner left open once they are due (a primary, on its maintenance thread: embedded,
and a real server killed with SIGKILL between the decision and the COMMITs), rolls back
the scope's other transactions, then ends the mark. A scope without a decision keeps the
plain mark's rules."""

from __future__ import annotations

import json
import time

import pytest

import fmq
from fmq import Message, TxState
from fmq.client import Client, Consumer, TransactionProducer
from fmq.errors import TransactionConflict, TransactionScopeClosed
from fmq.protocol import Op
from fmq.tx.scope_decision import DECISION_KEY, decision_message, parse_decision
from tests.server.harness import ServerProcess, broker_stats, wait_until

CFG = dict(segment_size=64 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
           retention_interval_ms=0)


def test_a_decision_message_names_the_winners_of_its_scope_only():
    m = decision_message("t", "S", ["S//b", "S//a", "S//a"])
    assert m.key == DECISION_KEY
    assert parse_decision("S", m.body).winners == {"S//a", "S//b"}
    assert m.body == decision_message("t", "S", ["S//a", "S//b"]).body  # one form
    assert parse_decision("T", m.body) is None  # another scope's
    assert parse_decision("S", b"committed") is None  # a plain mark's body
    assert parse_decision("S", b'{"scope":"S","commit":["T//a"]}') is None
    with pytest.raises(ValueError, match="not of the scope"):
        decision_message("t", "S", ["T//a"])


def _open(b: fmq.Broker) -> set[str]:
    return {t["tx_id"] for t in b.transactions.open_transactions()}


def _bodies(b: fmq.Broker) -> list[bytes]:
    return sorted(bytes(m.body) for msgs in b.reads.all_messages(["t"]).values() for m in msgs)


def test_the_broker_commits_a_decided_scopes_winners_its_owner_left_open(tmp_path):
    """``S//a``, ``S//b``, ``S//c`` prepared; the decision names a and b; the owner
    commits a and is lost. b is never offered and never rolled back by anyone; once due,
    the broker commits b, rolls back c (not named) and ends the mark."""
    cfg = fmq.BrokerConfig(**CFG, tx_check_after_ms=300, tx_check_max_interval_ms=600)
    with fmq.Broker.open(str(tmp_path / "data"), cfg) as b:
        tx = b.transactions
        for name in "abc":
            tx.prepare([Message("t", f"S//{name}".encode())], "g", tx_id=f"S//{name}")
        tx.prepare([decision_message("t", "S", ["S//a", "S//b"])], "g", tx_id="S")
        with pytest.raises(TransactionScopeClosed):
            tx.prepare([Message("t", b"late")], "g", tx_id="S//d")
        assert tx.commit("S//a", "g") == TxState.COMMIT
        with pytest.raises(TransactionConflict, match="decision mark 'S'.*names it"):
            tx.rollback("S//b", "g")
        with pytest.raises(TransactionConflict, match="names it"):  # a check-back answer
            tx.answer_uncertain("S//b", TxState.ROLLBACK, producer_group="g")
        with pytest.raises(TransactionConflict, match="still holds open"):
            tx.rollback("S", "g")
        offered: set[str] = set()
        deadline = time.monotonic() + 20
        while _open(b) & {"S//b", "S//c", "S"} and time.monotonic() < deadline:
            offered |= {u.tx_id for u in tx.poll_uncertain("g", 16, 100, 50)}
        assert _open(b) == set()
        assert offered == set()  # neither the winner, the loser nor the mark was asked
        s = b.stats()
        assert s["tx_decided_scope_commits"] == 1
        assert s["tx_closed_scope_rollbacks"] == 1
        with pytest.raises(TransactionConflict):
            tx.commit("S//c", "g")
        assert b.wait_indexed()
        assert _bodies(b) == [b"S//a", b"S//b"]


def test_a_plain_mark_still_rolls_back_every_leftover(tmp_path):
    """A mark whose message is not a decision (the key without a decision body, or any
    other message) decides nothing: the scope's leftovers are rolled back, as before."""
    cfg = fmq.BrokerConfig(**CFG, tx_check_after_ms=200, tx_check_max_interval_ms=400)
    with fmq.Broker.open(str(tmp_path / "data"), cfg) as b:
        tx = b.transactions
        tx.prepare([Message("t", b"x")], "g", tx_id="P//a")
        tx.prepare([Message("t", b"not json", key=DECISION_KEY)], "g", tx_id="P")
        assert tx.rollback("P//a", "g") == TxState.ROLLBACK  # no decision: allowed
        tx.prepare([Message("t", b"y")], "g", tx_id="Q//a")
        tx.prepare([Message("t", b"committed")], "g", tx_id="Q")
        wait_until(lambda: not _open(b) & {"Q//a"}, 20, "the leftover to be rolled back")
        assert b.stats()["tx_decided_scope_commits"] == 0
        assert _bodies(b) == []


#: Nobody is asked, nor anything finished by the broker, before the kill; soon after.
NEVER_DUE = {"tx_check_after_ms": 600_000, "checkpoint_interval_ms": 0}
SOON_DUE = {"tx_check_after_ms": 500, "tx_check_max_interval_ms": 1000,
            "checkpoint_interval_ms": 0}


def _open_ids(address: str) -> set[str]:
    with Client(address) as c:
        return {t["tx_id"] for t in c.call(Op.LIST_TX, {})["transactions"]}


def _consumed(address: str, group: str, limit: float = 30.0) -> list[bytes]:
    """The bodies of topic ``decided`` a new consumer group reads, once 1 s passed idle."""
    got: list[bytes] = []
    with Consumer(address, group, "decided", start="earliest") as c:
        deadline = time.monotonic() + limit
        last = time.monotonic()
        while time.monotonic() - last < 1.0 and time.monotonic() < deadline:
            batch = c.poll(0.3)
            if batch:
                got.extend(bytes(m.body) for m in batch)
                last = time.monotonic()
    return sorted(got)


@pytest.mark.timeout(180)
def test_a_killed_server_finishes_a_decision_after_its_restart(tmp_path):
    """Four transactions of ``W`` prepared, the decision naming three written, one of them
    committed, then the server killed with SIGKILL (the owner never comes back) and
    started again: the broker commits the two other winners and rolls back the fourth on
    its own, durably (a second SIGKILL keeps it); the topic holds each winner once."""
    srv = ServerProcess(str(tmp_path / "data"), NEVER_DUE)
    try:
        srv.start()
        ids = [f"W//{i}" for i in range(4)]
        winners = ids[:3]
        with TransactionProducer(srv.address, "g", lambda u: TxState.UNKNOWN,
                                 feedback=False) as p:
            for tx_id in ids:
                p.prepare([Message("decided", tx_id.encode())], tx_id=tx_id)
            p.prepare([decision_message("decided", "W", winners)], tx_id="W")
            assert p.commit(winners[0]) == TxState.COMMIT  # then the owner is lost
        assert _open_ids(srv.address) == {"W", *ids[1:]}
        srv.kill()
        with open(srv.config_path, "w") as f:
            json.dump(SOON_DUE, f)
        srv.start()
        wait_until(lambda: not _open_ids(srv.address), 30, "the decision to be finished")
        assert _consumed(srv.address, "first") == sorted(w.encode() for w in winners)
        assert broker_stats(srv.address)["tx_decided_scope_commits"] == 2
        assert "the decision mark 'W' of producer group 'g' names it" in srv.log()
        srv.kill()
        srv.start()
        with TransactionProducer(srv.address, "g", lambda u: TxState.UNKNOWN,
                                 feedback=False) as p:
            for tx_id in winners:
                assert p.commit(tx_id) == TxState.COMMIT
            with pytest.raises(TransactionConflict):
                p.commit(ids[3])
        assert _consumed(srv.address, "second") == sorted(w.encode() for w in winners)
    finally:
        srv.kill()
