"""Feedback leases against a hostile client: a foreign connection polling another producer
group's open transactions with a huge lease delays the real producer's checker at most by
``max_feedback_lease_ms``, and not at all once that connection is gone."""

from __future__ import annotations

import threading
import time

import fmq
from fmq.client import Client, TransactionProducer
from fmq.protocol import Op

from .conftest import FAST

HUGE_LEASE_MS = 0xFFFF_FFFF  # the most the wire allows: 49.7 days
#: Long enough that only the fix can explain the producer being asked within it.
ASKED_WITHIN_S = 20.0


def leave_open(address: str, group: str, body: bytes) -> str:
    """A transaction of ``group`` left open, as by a producer that died after prepare."""
    with TransactionProducer(address, group, lambda u: fmq.TxState.UNKNOWN,
                             feedback=False) as p:
        res = p.send_in_transaction(fmq.Message("leased", body),
                                    lambda tx, arg: fmq.TxState.UNKNOWN)
    assert res.state == fmq.TxState.OPEN
    return res.tx_id


def hijack(client: Client, group: str) -> list[str]:
    """Poll ``group``'s uncertain transactions with the largest lease the wire allows."""
    resp = client.call(Op.POLL_UNCERTAIN, {"producer_group": group, "max_items": 100,
                                           "lease_ms": HUGE_LEASE_MS, "wait_ms": 10_000},
                       timeout=20)
    return [t["tx_id"] for t in resp["transactions"]]


class RealProducer:
    """The group's own producer with feedback on; its checker records each question."""

    def __init__(self, address: str, group: str) -> None:
        self.asked: list[fmq.UncertainTx] = []
        self.first = threading.Event()

        def checker(u: fmq.UncertainTx) -> fmq.TxState:
            self.asked.append(u)
            self.first.set()
            return fmq.TxState.COMMIT

        self.producer = TransactionProducer(address, group, checker)

    def close(self) -> None:
        self.producer.close()


def open_transactions(address: str) -> list[str]:
    with Client(address) as c:
        return [t["tx_id"] for t in c.call(Op.LIST_TX, {})["transactions"]]


def test_a_held_huge_lease_is_capped(start_server):
    srv = start_server(dict(FAST, max_feedback_lease_ms=1500))
    tx = leave_open(srv.address, "shop", b"capped")
    thief = Client(srv.address)
    real = None
    try:
        assert hijack(thief, "shop") == [tx]
        real = RealProducer(srv.address, "shop")
        # The thief keeps its connection open the whole time.
        assert real.first.wait(ASKED_WITHIN_S), (
            f"the producer's checker was not asked within {ASKED_WITHIN_S}s while another "
            f"connection held a lease of {HUGE_LEASE_MS} ms")
        assert real.asked[0].tx_id == tx and real.asked[0].checks == 2
        deadline = time.monotonic() + 10
        while tx in open_transactions(srv.address) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tx not in open_transactions(srv.address)
        assert thief.ping()["protocol_version"] == 1  # still connected
    finally:
        if real is not None:
            real.close()
        thief.close()


def test_a_closed_connection_returns_its_leases(start_server):
    # The default cap (60 s) is far beyond the wait below: only the release on close counts.
    srv = start_server(FAST)
    tx = leave_open(srv.address, "shop", b"released")
    with Client(srv.address) as thief:
        assert hijack(thief, "shop") == [tx]
    real = RealProducer(srv.address, "shop")
    try:
        assert real.first.wait(ASKED_WITHIN_S), (
            f"the producer's checker was not asked within {ASKED_WITHIN_S}s after the "
            f"connection holding the lease closed")
        assert real.asked[0].tx_id == tx
    finally:
        real.close()


def test_only_the_lease_owner_can_return_a_lease(start_server):
    srv = start_server(FAST)  # the default cap: 60 s
    tx = leave_open(srv.address, "shop", b"owned")
    with Client(srv.address) as owner, Client(srv.address) as other:
        assert hijack(owner, "shop") == [tx]
        # Another connection's "unknown" must not free the owner's lease.
        assert other.call(Op.ANSWER_UNCERTAIN, {"producer_group": "shop", "tx_id": tx,
                                                "state": "unknown"}) == {
            "state": "unknown"}
        poll = {"producer_group": "shop", "max_items": 10, "lease_ms": 1000, "wait_ms": 2000}
        assert other.call(Op.POLL_UNCERTAIN, poll)["transactions"] == []
        # The owner's "unknown" does; the next poll gets it once its back-off has passed.
        owner.call(Op.ANSWER_UNCERTAIN, {"producer_group": "shop", "tx_id": tx,
                                         "state": "unknown"})
        deadline = time.monotonic() + ASKED_WITHIN_S
        got: list = []
        while not got and time.monotonic() < deadline:
            got = other.call(Op.POLL_UNCERTAIN, poll)["transactions"]
        assert [t["tx_id"] for t in got] == [tx]
        # Commit and rollback are accepted from any connection: the group decides.
        assert owner.call(Op.ANSWER_UNCERTAIN, {"producer_group": "shop", "tx_id": tx,
                                                "state": "commit"}) == {
            "state": "commit"}
    assert tx not in open_transactions(srv.address)
