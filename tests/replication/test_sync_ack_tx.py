"""``ack_mode = "sync"`` and transactions on the send pipeline: a PREPARE the followers
did not confirm fails with NotEnoughReplicas, but it is stored on the primary, so the
primary keeps it as a prepared transaction (listed; feedback or an operator ends it)
rather than forgetting a prepare its log holds, and the producer's retry of it is answered
from that first attempt once the followers hold it."""

from __future__ import annotations

import threading
import time

import pytest

from fmq.client import Client, Producer, TransactionProducer
from fmq.client.producer import TransactionResult
from fmq.errors import NotEnoughReplicas
from fmq.message import Message
from fmq.protocol import Op
from fmq.tx.state import TxState

from .cluster import SMALL, pull_all, status, wait_caught_up, wait_in_sync

SYNC = {**SMALL, "ack_mode": "sync", "min_insync": 1, "max_lag_ms": 1000}


def test_a_prepare_the_followers_missed_stays_prepared_on_the_primary(node):
    primary = node("primary", SYNC)
    follower = node("follower", {**SMALL, "follow": primary.address})
    wait_in_sync(primary)
    with Producer(primary.address, retries=0) as p:
        follower.kill()
        deadline = time.monotonic() + 20
        with pytest.raises(NotEnoughReplicas):
            while time.monotonic() < deadline:  # in sync until max_lag_ms passes
                p.send("t", b"maybe")
    with TransactionProducer(primary.address, "g", None, feedback=False,
                             retries=0) as tp, pytest.raises(NotEnoughReplicas):
        tp.prepare([Message("t", b"stored here only")], tx_id="tx-missed")
    with Client(primary.address, retries=0) as c:
        listed = c.call(Op.LIST_TX, {})["transactions"]
    assert [(t["tx_id"], t["state"], t["messages"]) for t in listed] == [
        ("tx-missed", "open", 1)]


def _until_not_enough_replicas(primary) -> None:
    """Send until the primary has no follower in sync (max_lag_ms after it went away)."""
    with Producer(primary.address, retries=0) as p:
        deadline = time.monotonic() + 20
        with pytest.raises(NotEnoughReplicas):
            while time.monotonic() < deadline:
                p.send("other", b"maybe")


def test_a_retried_prepare_commits_once_the_follower_is_back(node):
    primary = node("primary", SYNC)
    follower = node("follower", {**SMALL, "follow": primary.address})
    wait_in_sync(primary)
    follower.kill()
    _until_not_enough_replicas(primary)
    batch = [Message("t", b"first"), Message("t", b"second", key="k2")]
    with TransactionProducer(primary.address, "g", None, feedback=False, retries=0) as tp:
        with pytest.raises(NotEnoughReplicas):
            tp.prepare(batch, tx_id="tx-retried")
        # Still no follower: the retry waits for the followers as the first attempt did.
        with pytest.raises(NotEnoughReplicas):
            tp.prepare(batch, tx_id="tx-retried")
    follower.start()
    wait_in_sync(primary)
    with TransactionProducer(primary.address, "g", None, feedback=False, retries=3) as tp:
        result = tp.send_in_transaction(batch, lambda tx_id, arg: TxState.COMMIT,
                                        tx_id="tx-retried")
    assert result == TransactionResult("tx-retried", TxState.COMMIT, TxState.COMMIT, None)
    wait_caught_up(follower, primary)
    for server in (primary, follower):  # one copy of each message, on both nodes
        bodies = sorted(b for q in pull_all(server, "t", 4) for _, _, b in q)
        assert bodies == [b"first", b"second"], server.address
    with Client(primary.address, retries=0) as c:
        assert c.call(Op.LIST_TX, {})["transactions"] == []


def test_send_in_transaction_retries_through_a_follower_outage(node):
    """The producer's own retries (a generated id): the first attempts are refused with
    NotEnoughReplicas while the follower is down; once it is back the retry commits."""
    primary = node("primary", SYNC)
    follower = node("follower", {**SMALL, "follow": primary.address})
    wait_in_sync(primary)
    follower.kill()
    _until_not_enough_replicas(primary)
    refused_before = status(primary)["not_enough_replicas"]
    outcome: list = []

    def send() -> None:
        with TransactionProducer(primary.address, "g", None, feedback=False, retries=60,
                                 backoff_max=0.5) as tp:
            try:
                outcome.append(tp.send_in_transaction(
                    [Message("t", b"one"), Message("t", b"two")],
                    lambda tx_id, arg: TxState.COMMIT))
            except Exception as exc:  # noqa: BLE001 - the assertion below shows it
                outcome.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    deadline = time.monotonic() + 20
    while status(primary)["not_enough_replicas"] < refused_before + 2:  # retried once
        assert time.monotonic() < deadline, "the prepare was never refused"
        assert not outcome, outcome
        time.sleep(0.05)
    follower.start()
    sender.join(60)
    [result] = outcome
    assert isinstance(result, TransactionResult), result
    assert (result.state, result.error) == (TxState.COMMIT, None)
    wait_caught_up(follower, primary)
    for server in (primary, follower):
        bodies = sorted(b for q in pull_all(server, "t", 4) for _, _, b in q)
        assert bodies == [b"one", b"two"], server.address
