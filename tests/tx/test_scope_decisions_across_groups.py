"""A scope whose transactions live in two broker groups of a cluster, decided in the first
group only (its owner lost between the two groups' decision marks): the second group's
primary finds the decision in the first (SCOPE_DECISION over its links to the other
groups' primaries), writes its own mark from it and carries it out: its winners
committed, its loser rolled back, a ROLLBACK of a winner refused meanwhile; a scope
decided nowhere stays open; a first group that cannot be asked delays the second,
never lets it decide alone (docs/transactions.md, *Scopes*). Real etcd, two real
``fmq server`` nodes (one per broker group), SIGKILL."""

from __future__ import annotations

import json
import os
import time

import pytest

from fmq import Message, TxState
from fmq.client import Client, TransactionProducer
from fmq.errors import FMQError, ScopeDecisionUnchecked, TransactionConflict
from fmq.protocol import Op
from fmq.tx.scope_decision import DECISION_KEY, GroupShare, decision_message, parse_decision
from tests.cluster.kit import CONFIG, known_everywhere, local_queues, two_groups
from tests.etcdkit import ETCD
from tests.server.harness import ServerProcess, broker_stats, wait_until

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

TOPIC = "decided-across"
PER_GROUP = 2
GROUP = "pg"
#: The brokers look at a scope 1 s after they learned of its transactions.
SOON = {**CONFIG, "tx_check_after_ms": 1000, "tx_check_max_interval_ms": 2000}
#: Nobody finishes anything on their own within a test.
LATE = {**CONFIG, "tx_check_after_ms": 600_000, "tx_check_max_interval_ms": 600_000}
#: g1 keeps W//a (winner) and W//b; g2 W//c, W//d (winners) and W//e.
IN_G1 = ["W//a", "W//b"]
IN_G2 = ["W//c", "W//d", "W//e"]


def _first_groups_decision() -> Message:
    """The mark the owner prepares in g1 before any COMMIT: g1's winner and g2's share.
    Written as its JSON so that the test reads the same on a tree without
    ``decision_message``'s ``groups`` (the tree before this rule)."""
    body = {"scope": "W", "commit": ["W//a"],
            "groups": {"g2": {"topic": TOPIC, "commit": ["W//c", "W//d"]}}}
    return Message(TOPIC, json.dumps(body, separators=(",", ":")).encode(), key=DECISION_KEY)


def _open(node: ServerProcess) -> set[str]:
    with Client(node.address, retries=0, request_timeout=10) as c:
        return {t["tx_id"] for t in c.call(Op.LIST_TX, {})["transactions"]}


def _bodies(node: ServerProcess) -> list[bytes]:
    out: list[bytes] = []
    with Client(node.address, retries=0, request_timeout=10) as c:
        for q in range(PER_GROUP):
            ans = c.call(Op.PULL, {"topic": TOPIC, "queue_id": q, "offset": 0,
                                   "max_messages": 1000, "wait_ms": 0})
            out += [bytes(m["body"]) for m in ans["messages"]]
    return sorted(out)


def _prepared_scope(nodes: dict[str, ServerProcess], store, decide: bool) -> None:
    """Route TOPIC over g1 and g2, prepare the scope's transactions in both groups and,
    with ``decide``, the decision in g1 only; the owner is gone after that."""
    route = store.create(TOPIC, PER_GROUP, ["g1", "g2"])
    known_everywhere(nodes, TOPIC, route.version)
    for node in nodes.values():
        wait_until(lambda n=node: local_queues(n, TOPIC) == PER_GROUP, 30,
                   "the route's queues made on each primary")
    with TransactionProducer(nodes["g1"].address, GROUP, lambda _u: TxState.UNKNOWN,
                             feedback=False) as p:
        for group, ids in (("g1", IN_G1), ("g2", IN_G2)):
            for tx_id in ids:
                p.prepare([Message(TOPIC, tx_id.encode())], tx_id=tx_id, group=group)
        if decide:
            p.prepare([_first_groups_decision()], tx_id="W", group="g1")
    assert IN_G2 == sorted(_open(nodes["g2"]))  # each where it was prepared
    assert {*IN_G1, *(["W"] if decide else [])} == _open(nodes["g1"])


def test_the_first_groups_mark_names_every_later_groups_share():
    m = decision_message(TOPIC, "W", ["W//a"], {"g2": GroupShare(TOPIC, frozenset(
        {"W//d", "W//c"}))})
    assert m.body == _first_groups_decision().body  # the documented form, one form
    decision = parse_decision("W", m.body)
    assert decision.winners == {"W//a"}
    assert decision.share_of("g2", "x") == GroupShare(TOPIC, frozenset({"W//c", "W//d"}))
    assert decision.share_of("g3", "x") == GroupShare("x", frozenset())  # no winner there
    assert parse_decision("W", b'{"scope":"W","commit":[],"groups":{"g2":{"topic":"t",'
                          b'"commit":["V//a"]}}}') is None  # another scope's in a share
    with pytest.raises(ValueError):
        decision_message(TOPIC, "W", [], {"g2": GroupShare(TOPIC, frozenset({"V//a"}))})
    # A scope of one group says nothing of others; one over several whose later groups
    # hold no winner says so (every transaction of the scope there is a loser).
    assert parse_decision("W", decision_message(TOPIC, "W", ["W//a"]).body).groups is None
    spread = parse_decision("W", decision_message(TOPIC, "W", ["W//a"], {}).body)
    assert spread.groups == {} and spread.share_of("g2", "x") == GroupShare("x", frozenset())


@pytest.mark.timeout(300)
def test_a_later_group_carries_out_the_first_groups_decision(tmp_path):
    """The owner decided in g1 and was lost before g2's mark: g2's broker finds the
    decision in g1, commits W//c and W//d, rolls back W//e, and both marks end once
    nothing is open. Before, g2's three transactions stayed open for good (nobody
    answers their check-back) while g1's winner was committed: the scope half visible."""
    with two_groups(tmp_path, SOON) as (store, nodes, _etcd):
        _prepared_scope(nodes, store, decide=True)
        started = time.monotonic()
        wait_until(lambda: not _open(nodes["g2"]), 60,
                   "g2 to end its transactions from g1's decision")
        took = time.monotonic() - started
        wait_until(lambda: _bodies(nodes["g2"]) == [b"W//c", b"W//d"], 30,
                   "g2's winners readable, its loser not")
        wait_until(lambda: not _open(nodes["g1"]), 60, "g1 to end its scope and its mark")
        wait_until(lambda: _bodies(nodes["g1"]) == [b"W//a"], 30, "g1's winner readable")
        g2 = broker_stats(nodes["g2"].address)
        assert (g2["tx_decided_scope_commits"], g2["tx_closed_scope_rollbacks"]) == (2, 1)
        assert took < 30, took  # two check-back periods and the maintenance's looks


@pytest.mark.timeout(300)
def test_a_rollback_of_a_later_groups_winner_is_refused(tmp_path):
    """g2 holds no mark of the scope; a ROLLBACK of its winner W//c, by a producer or an
    operator (RESOLVE_TX, `fmq tx resolve --server`), asks g1 first and is refused with
    TransactionConflict; the loser W//e rolls back; the owner's COMMIT of W//c stands.
    g1's mark is not rolled back before g2 holds a mark of its own."""
    with two_groups(tmp_path, LATE) as (store, nodes, _etcd):
        _prepared_scope(nodes, store, decide=True)
        g1, g2 = nodes["g1"].address, nodes["g2"].address
        with Client(g1, retries=0, request_timeout=20) as c:
            c.call(Op.COMMIT, {"producer_group": GROUP, "tx_id": "W//a"})
            c.call(Op.ROLLBACK, {"producer_group": GROUP, "tx_id": "W//b"})
            with pytest.raises(TransactionConflict, match="g2 hold no mark of it yet"):
                c.call(Op.ROLLBACK, {"producer_group": GROUP, "tx_id": "W"})
        with Client(g2, retries=0, request_timeout=20) as c:
            for op, fields in ((Op.ROLLBACK, {}), (Op.RESOLVE_TX, {"decision": "rollback"})):
                with pytest.raises(TransactionConflict, match="decision mark 'W'"):
                    c.call(op, {"producer_group": GROUP, "tx_id": "W//c", **fields})
            assert "W" in _open(nodes["g2"])  # g2's own mark, written from g1's decision
        # The owner, slow but alive, writes g2's mark after g2 did: the same bytes, so its
        # PREPARE is answered as a retry of the one stored.
        with TransactionProducer(nodes["g1"].address, GROUP, lambda _u: TxState.UNKNOWN,
                                 feedback=False) as p:
            assert p.prepare([decision_message(TOPIC, "W", ["W//c", "W//d"])], tx_id="W",
                             group="g2") == "W"
        with Client(g2, retries=0, request_timeout=20) as c:
            assert c.call(Op.ROLLBACK, {"producer_group": GROUP, "tx_id": "W//e"})[
                "state"] == TxState.ROLLBACK.value
            for tx_id in ("W//c", "W//d"):
                assert c.call(Op.COMMIT, {"producer_group": GROUP, "tx_id": tx_id})[
                    "state"] == TxState.COMMIT.value
        with Client(g1, retries=0, request_timeout=20) as c:  # g2 holds its mark now
            assert c.call(Op.ROLLBACK, {"producer_group": GROUP, "tx_id": "W"})[
                "state"] == TxState.ROLLBACK.value
        assert _open(nodes["g1"]) == set()
        wait_until(lambda: _bodies(nodes["g2"]) == [b"W//c", b"W//d"], 30, "g2's winners")


@pytest.mark.timeout(300)
def test_a_scope_decided_nowhere_stays_open(tmp_path):
    """No group holds a decision: g2's broker asks g1 at each look and leaves its
    transactions open, neither committed nor rolled back, through several check-back
    periods; the owner's own ROLLBACK (a failed task's) is still taken."""
    with two_groups(tmp_path, SOON) as (store, nodes, _etcd):
        _prepared_scope(nodes, store, decide=False)
        deadline = time.monotonic() + 8  # eight check-back periods
        while time.monotonic() < deadline:
            assert _open(nodes["g2"]) == set(IN_G2)
            assert _open(nodes["g1"]) == set(IN_G1)
            time.sleep(0.5)
        assert _bodies(nodes["g2"]) == [] and _bodies(nodes["g1"]) == []
        stats = broker_stats(nodes["g2"].address)
        assert (stats["tx_decided_scope_commits"], stats["tx_closed_scope_rollbacks"]) == (0, 0)
        with Client(nodes["g2"].address, retries=0, request_timeout=20) as c:
            assert c.call(Op.ROLLBACK, {"producer_group": GROUP, "tx_id": "W//c"})[
                "state"] == TxState.ROLLBACK.value


@pytest.mark.timeout(300)
def test_a_first_group_out_of_reach_delays_the_later_one_and_never_lets_it_guess(tmp_path):
    """g1 is killed (SIGKILL) right after its decision: g2 cannot ask it, so its
    transactions stay open (no "nothing found") and a ROLLBACK of one is refused as
    retriable (ScopeDecisionUnchecked); g1 started again, g2 carries the decision out."""
    with two_groups(tmp_path, SOON) as (store, nodes, _etcd):
        _prepared_scope(nodes, store, decide=True)
        nodes["g1"].kill()
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            assert _open(nodes["g2"]) == set(IN_G2)
            time.sleep(0.5)
        with Client(nodes["g2"].address, retries=0, request_timeout=30) as c:
            with pytest.raises(ScopeDecisionUnchecked) as refused:
                c.call(Op.ROLLBACK, {"producer_group": GROUP, "tx_id": "W//e"})
            assert refused.value.retriable
        assert _open(nodes["g2"]) == set(IN_G2)
        nodes["g1"].start()
        wait_until(lambda: _bodies(nodes["g2"]) == [b"W//c", b"W//d"], 90,
                   "g2 to carry out g1's decision once g1 answers")
        wait_until(lambda: not _safe_open(nodes["g2"]), 60, "nothing open in g2")
        wait_until(lambda: _bodies(nodes["g1"]) == [b"W//a"], 60, "g1's winner readable")


def _safe_open(node: ServerProcess) -> set[str] | None:
    try:
        return _open(node)
    except FMQError:
        return {"(not answering)"}


@pytest.mark.timeout(300)
def test_tx_timeout_asks_before_rolling_back_a_later_groups_winner(tmp_path):
    """g2 rolls back transactions open over ``tx_timeout_ms`` (2 s) and never finishes a
    scope on its own within the test: its timeout asks g1 first, writes g2's mark from
    g1's decision, rolls back the loser W//e and leaves the winners open (refused) for
    their commit. Before, the timeout rolled the winners back: g1's half committed, g2's
    gone."""
    with two_groups(tmp_path, {**LATE, "tx_timeout_ms": 2000}) as (store, nodes, _etcd):
        _prepared_scope(nodes, store, decide=True)
        wait_until(lambda: _open(nodes["g2"]) == {"W", "W//c", "W//d"}, 60,
                   "g2's timeout to end its loser only, from g1's decision")
        time.sleep(4)  # two more timeout periods: the winners stay
        assert _open(nodes["g2"]) == {"W", "W//c", "W//d"}
        assert broker_stats(nodes["g2"].address)["tx_timeouts"] == 1
