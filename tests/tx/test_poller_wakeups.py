"""A prepare wakes the feedback pollers waiting in ``poll_uncertain`` only when the new
transaction falls due before they would wake anyway: the check-back path stays off the
commit path. A real embedded broker; the poller is a real thread long-polling."""

from __future__ import annotations

import threading
import time

import fmq
from fmq import Message


def open_broker(path: str, check_after_ms: int) -> fmq.Broker:
    return fmq.Broker.open(path, fmq.BrokerConfig(
        segment_size=256 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
        retention_interval_ms=0, tx_check_after_ms=check_after_ms))


def start_poller(b: fmq.Broker, wait_ms: int) -> tuple[threading.Thread, list]:
    """A thread long-polling the group "shop"; returns once it is waiting."""
    got: list = []
    thread = threading.Thread(target=lambda: got.extend(
        b.transactions.poll_uncertain("shop", wait_ms=wait_ms)))
    thread.start()
    deadline = time.monotonic() + 10
    while b._tx._waiting == 0:  # bounded: the poller starts waiting at once
        assert time.monotonic() < deadline, "the poller never started waiting"
        time.sleep(0.005)
    return thread, got


def test_prepares_not_due_before_the_pollers_wake_wake_nobody(tmp_path):
    with open_broker(str(tmp_path / "d"), check_after_ms=60_000) as b:
        thread, got = start_poller(b, wait_ms=1000)
        ids = [b.transactions.prepare([Message("t", f"m{i}".encode())], "shop") for i in range(20)]
        thread.join(10)
        assert not thread.is_alive()
        assert got == []  # none is due for a minute
        assert b._tx.poller_wakeups == 0
        for tx_id in ids:  # and every one of them is still there to commit
            assert b.transactions.commit(tx_id) == fmq.TxState.COMMIT


def test_a_prepare_due_before_the_poller_wakes_wakes_it(tmp_path):
    with open_broker(str(tmp_path / "d"), check_after_ms=0) as b:
        thread, got = start_poller(b, wait_ms=5000)
        tx_id = b.transactions.prepare([Message("t", b"due at once")], "shop")
        thread.join(10)
        assert not thread.is_alive()
        assert b._tx.poller_wakeups == 1
        assert [u.tx_id for u in got] == [tx_id]
        assert b._tx._waiting == 0
