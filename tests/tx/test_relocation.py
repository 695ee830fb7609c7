"""An abandoned transaction does not pin the log: retention relocates it (its PREPARE and
PRE_MESSAGEs rewritten at the log head) so older segments can go, atomically with respect
to recovery; and ``tx_timeout_ms`` rolls back transactions left open too long."""

from __future__ import annotations

import os
import time

import pytest

import fmq
from fmq import TxState
from tests.crashkit import run_child
from tests.server.harness import wait_until

CFG = dict(segment_size=64 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
           retention_interval_ms=0, retention_bytes=256 * 1024, tx_check_after_ms=50)
TX_BODIES = [f"tx-{i}-".encode().ljust(900, b"t") for i in range(3)]
FILL = 2000  # 1 KiB plain messages: about 2 MiB, 8x the retention limit


def log_bytes(data: str) -> int:
    log_dir = os.path.join(data, "log")
    return sum(os.path.getsize(os.path.join(log_dir, n)) for n in os.listdir(log_dir)
               if n.endswith(".seg"))


def visible(b: fmq.Broker, topic: str) -> list[bytes]:
    assert b.wait_indexed()
    return sorted(bytes(m.body) for msgs in b.reads.all_messages([topic]).values() for m in msgs)


def fill(b: fmq.Broker, n: int = FILL) -> None:
    for i in range(0, n, 100):
        b.send_batch([fmq.Message("fill", f"f{j}-".encode().ljust(1024, b"f"))
                      for j in range(i, i + 100)])


def test_retention_relocates_an_abandoned_transaction_and_bounds_the_log(tmp_path):
    data = str(tmp_path / "data")
    cfg = fmq.BrokerConfig(**CFG)
    with fmq.Broker.open(data, cfg) as b:
        tx = b.transactions.prepare([fmq.Message("pay", body) for body in TX_BODIES], "shop",
                                    tx_id="old")
        first_prepare = b.transactions.open_transactions()[0]["prepare_offset"]
        fill(b)
        assert b.wait_indexed()
        deleted = b.enforce_retention()
        assert deleted
        # The log is bounded by the limit (plus the active segment and the one it rolled
        # from), not pinned at the abandoned PREPARE.
        assert log_bytes(data) <= cfg.retention_bytes + 2 * cfg.segment_size
        [info] = b.transactions.open_transactions()
        assert info["tx_id"] == "old" and info["messages"] == 3
        assert info["prepare_offset"] > first_prepare >= 0
        assert info["prepare_offset"] >= b._log.first_offset
        assert b.stats()["tx_relocations"] >= 1
        assert visible(b, "pay") == []  # still invisible: relocation is no commit
    with fmq.Broker.open(data, cfg) as b:  # the relocated copy is what recovery finds
        [info] = b.transactions.open_transactions()
        assert info["tx_id"] == "old" and info["messages"] == 3
        assert b.recovery.start_offset >= b._log.first_offset
        assert b.transactions.commit(tx) == TxState.COMMIT
        assert visible(b, "pay") == sorted(TX_BODIES)
    with fmq.Broker.open(data, cfg) as b:
        assert visible(b, "pay") == sorted(TX_BODIES)
        assert b.transactions.open_transactions() == []


RELOCATION_CRASHES = {
    "before the relocation's write": dict(op="pwrite", mode="before"),
    "relocated PREPARE only": dict(op="pwrite", mode="records", records=1),
    "inside the relocated PRE_MESSAGEs": dict(op="pwrite", mode="records", records=2, extra=100),
    "relocation written, before its fsync": dict(op="pwrite", mode="after"),
    "relocation durable, before the first segment deletion": dict(op="unlink", mode="before"),
}


@pytest.mark.parametrize("crash", list(RELOCATION_CRASHES))
def test_crash_during_relocation_keeps_the_transaction_whole(tmp_path, crash):
    data = str(tmp_path / "data")
    child = run_child("relocation_crash", data, str(tmp_path / "acks"), cfg=CFG, fill=FILL,
                      bodies=[b.decode() for b in TX_BODIES], arm=RELOCATION_CRASHES[crash])
    assert child.killed, child.stderr
    assert [a["event"] for a in child.acks] == ["prepared"]
    cfg = fmq.BrokerConfig(**CFG)
    with fmq.Broker.open(data, cfg) as b:
        # Whichever copy survived, the transaction is open, whole, and invisible.
        assert b.recovery.incomplete_prepares == []
        [info] = b.transactions.open_transactions()
        assert info["tx_id"] == "old" and info["messages"] == 3
        assert visible(b, "pay") == []
        # Retention runs again to completion, then the producer commits.
        b.enforce_retention()
        assert log_bytes(data) <= cfg.retention_bytes + 2 * cfg.segment_size
        assert b.transactions.commit("old") == TxState.COMMIT
        assert visible(b, "pay") == sorted(TX_BODIES)
        assert len(visible(b, "fill")) <= FILL
    with fmq.Broker.open(data, cfg) as b:
        assert visible(b, "pay") == sorted(TX_BODIES)
        assert b.transactions.open_transactions() == []


def test_tx_timeout_rolls_back_a_transaction_left_open(tmp_path, caplog):
    cfg = fmq.BrokerConfig(**{**CFG, "retention_bytes": 0, "tx_timeout_ms": 300})
    with fmq.Broker.open(str(tmp_path / "data"), cfg) as b:
        b.transactions.prepare([fmq.Message("pay", b"abandoned")], "shop", tx_id="abandoned")
        kept = b.transactions.prepare([fmq.Message("pay", b"kept")], "shop", tx_id="kept")
        assert b.transactions.commit(kept) == TxState.COMMIT  # ended in time: never touched
        wait_until(lambda: b.transactions.open_transactions() == [], 20, "the timed-out rollback")
        assert b.stats()["tx_timeouts"] == 1
        assert b.transactions.rollback("abandoned") == TxState.ROLLBACK
        with pytest.raises(fmq.TransactionConflict):
            b.transactions.commit("abandoned")
        assert visible(b, "pay") == [b"kept"]
    assert any("tx_timeout_ms" in r.getMessage() for r in caplog.records)


def test_without_tx_timeout_an_open_transaction_stays_open(tmp_path):
    cfg = fmq.BrokerConfig(**{**CFG, "retention_bytes": 0})
    assert cfg.tx_timeout_ms == 0  # off by default: the broker never decides on its own
    with fmq.Broker.open(str(tmp_path / "data"), cfg) as b:
        b.transactions.prepare([fmq.Message("pay", b"open")], "shop", tx_id="open")
        time.sleep(1.0)
        assert [t["tx_id"] for t in b.transactions.open_transactions()] == ["open"]
        assert b.stats()["tx_timeouts"] == 0
