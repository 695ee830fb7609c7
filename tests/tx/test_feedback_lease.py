"""Feedback leases through the embedded API: capped by ``max_feedback_lease_ms``, owned by
the poller that took them, returned only by it (or all at once when it goes away)."""

from __future__ import annotations

import pytest

import fmq
from fmq import Message, TxState

HUGE_LEASE_MS = 0xFFFF_FFFF


@pytest.fixture
def capped(tmp_path):
    cfg = fmq.BrokerConfig(segment_size=64 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
                           retention_interval_ms=0, tx_check_after_ms=0,
                           max_feedback_lease_ms=300)
    with fmq.Broker.open(str(tmp_path / "capped"), cfg) as b:
        yield b


@pytest.fixture
def uncapped(tmp_path):
    """The default cap (60 s): far longer than any wait below."""
    cfg = fmq.BrokerConfig(segment_size=64 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
                           retention_interval_ms=0, tx_check_after_ms=0)
    with fmq.Broker.open(str(tmp_path / "uncapped"), cfg) as b:
        yield b


def prepare(b: fmq.Broker, group: str = "shop") -> str:
    return b.transactions.prepare([Message("t", b"x" * 300)], group)


def test_a_huge_lease_is_lowered_to_the_cap(capped):
    tx = prepare(capped)
    [u] = capped.transactions.poll_uncertain("shop", lease_ms=HUGE_LEASE_MS, wait_ms=5000,
                                             owner="thief")
    assert u.tx_id == tx
    # Offered again once the capped lease (and the back-off) ran out, not in 49 days.
    [again] = capped.transactions.poll_uncertain("shop", wait_ms=10_000, owner="producer")
    assert again.tx_id == tx and again.checks == 2


def test_the_lease_is_held_against_other_pollers(uncapped):
    prepare(uncapped)
    assert uncapped.transactions.poll_uncertain("shop", lease_ms=60_000, wait_ms=5000, owner="a")
    assert uncapped.transactions.poll_uncertain("shop", wait_ms=1000, owner="b") == []


def test_only_the_owner_returns_a_lease_with_unknown(uncapped):
    tx = prepare(uncapped)
    uncapped.transactions.poll_uncertain("shop", lease_ms=60_000, wait_ms=5000, owner="a")
    assert uncapped.transactions.answer_uncertain(tx, TxState.UNKNOWN, owner="b") == TxState.UNKNOWN
    assert uncapped.transactions.poll_uncertain("shop", wait_ms=1000, owner="b") == []  # still a's
    assert uncapped.transactions.answer_uncertain(tx, TxState.UNKNOWN, owner="a") == TxState.UNKNOWN
    [u] = uncapped.transactions.poll_uncertain("shop", wait_ms=5000, owner="b")
    assert u.tx_id == tx and u.checks == 2


def test_anyone_may_commit_or_roll_back_a_leased_transaction(uncapped):
    first, second = prepare(uncapped), prepare(uncapped)
    assert len(uncapped.transactions.poll_uncertain("shop", lease_ms=60_000, wait_ms=5000,
                                                    owner="a")) == 2
    assert uncapped.transactions.answer_uncertain(first, TxState.COMMIT,
                                                  owner="b") == TxState.COMMIT
    assert uncapped.transactions.answer_uncertain(second, TxState.ROLLBACK) == TxState.ROLLBACK
    assert uncapped.transactions.open_transactions() == []


def test_releasing_an_owner_returns_only_its_leases_at_once(uncapped):
    mine, theirs = prepare(uncapped, "shop"), prepare(uncapped, "other")
    uncapped.transactions.poll_uncertain("shop", lease_ms=60_000, wait_ms=5000, owner="gone")
    uncapped.transactions.poll_uncertain("other", lease_ms=60_000, wait_ms=5000, owner="alive")
    assert uncapped.transactions.release_feedback_leases("gone") == 1
    # at once: not after the back-off the first offer set
    assert [u.tx_id for u in uncapped.transactions.poll_uncertain("shop", owner="next")] == [mine]
    assert uncapped.transactions.poll_uncertain("other", wait_ms=500, owner="next") == []
    assert uncapped.transactions.release_feedback_leases("gone") == 0
    assert [t["tx_id"] for t in uncapped.transactions.open_transactions()] == [mine, theirs]


def test_the_lease_cap_is_validated():
    with pytest.raises(fmq.ConfigError, match="max_feedback_lease_ms"):
        fmq.BrokerConfig(max_feedback_lease_ms=0)
