"""Fault 10: wall-clock jumps do not change feedback (check-back) timing.

The transaction manager times check-backs with ``time.monotonic``. The wall clock
(``time.time`` / ``time.time_ns``, which the broker uses for store times) is made to jump a
day forward or back, in this process, while a transaction waits for its first check:

* a forward jump must not offer it before ``tx_check_after_ms`` of real time;
* a backward jump must not hide it after that;
* a long poll (``wait_ms``) lasts its real duration whatever the wall clock does.

A control run with the monotonic clock itself jumped shows the test can fail: then the
offer comes early.
"""

from __future__ import annotations

import time

import pytest

import fmq
from tests.faults.workload import INDEX_WRITER

DAY = 86_400.0
CHECK_AFTER_MS = 400


def _broker(tmp_path):
    return fmq.Broker.open(str(tmp_path / "data"), fmq.BrokerConfig(
        segment_size=16 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
        retention_interval_ms=0, tx_check_after_ms=CHECK_AFTER_MS, index_writer=INDEX_WRITER))


def _jump_wall_clock(monkeypatch, seconds: float) -> None:
    real_time, real_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real_time() + seconds)
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + int(seconds * 1e9))


@pytest.mark.parametrize("jump", [DAY, -DAY, 365 * DAY, -30.0])
def test_wall_clock_jump_neither_hastens_nor_hides_a_check_back(tmp_path, monkeypatch, jump):
    with _broker(tmp_path) as b:
        t0 = time.monotonic()
        tx = b.transactions.prepare([fmq.Message("orders", b"x")], "shop", tx_id="tx-clock")
        before = time.time()
        _jump_wall_clock(monkeypatch, jump)
        assert abs(time.time() - before - jump) < 5, "the wall clock did not jump"
        early = b.transactions.poll_uncertain("shop")
        assert early == [] or time.monotonic() - t0 >= CHECK_AFTER_MS / 1000, \
            f"a wall-clock jump of {jump}s offered the transaction early"
        got = b.transactions.poll_uncertain("shop", wait_ms=3 * CHECK_AFTER_MS)
        waited = time.monotonic() - t0
        assert [u.tx_id for u in got] == [tx], \
            f"a wall-clock jump of {jump}s hid the transaction from feedback"
        assert CHECK_AFTER_MS / 1000 * 0.9 <= waited < CHECK_AFTER_MS / 1000 + 2.0
        assert b.transactions.open_transactions()[0]["tx_id"] == tx
        assert b.transactions.rollback(tx) == fmq.TxState.ROLLBACK


@pytest.mark.parametrize("jump", [DAY, -DAY])
def test_long_poll_lasts_its_real_duration(tmp_path, monkeypatch, jump):
    with _broker(tmp_path) as b:
        _jump_wall_clock(monkeypatch, jump)
        t0 = time.monotonic()
        assert b.transactions.poll_uncertain("nobody", wait_ms=300) == []
        assert 0.25 <= time.monotonic() - t0 < 2.0


def test_control_a_monotonic_jump_is_noticed(tmp_path, monkeypatch):
    """The detector works: jump the clock feedback does use, and the offer comes early."""
    with _broker(tmp_path) as b:
        tx = b.transactions.prepare([fmq.Message("orders", b"x")], "shop", tx_id="tx-control")
        real = time.monotonic
        monkeypatch.setattr(time, "monotonic", lambda: real() + DAY)
        got = b.transactions.poll_uncertain("shop")
        monkeypatch.setattr(time, "monotonic", real)
        assert [u.tx_id for u in got] == [tx]
        b.transactions.rollback(tx)
