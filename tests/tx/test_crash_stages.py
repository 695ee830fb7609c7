"""The crash table of ``docs/transactions.md`` (stages S1 - S8), one SIGKILL per
stage.

A child process (:mod:`tests.workloads.transaction_stage_crash`) sends one plain message,
then runs a three-message transaction; the crash harness kills it with SIGKILL at the exact
point of the stage (an armed I/O operation, not a sleep). The parent reopens the broker and
checks the outcome the table gives, with FMQ's roll-forward where a commit was under way,
then completes the transaction the way the producer would through feedback and checks
that every message is consumable exactly once, and that nothing of a rolled-back or open
transaction is ever pulled.
"""

from __future__ import annotations

import pytest

import fmq
from fmq import TxState
from tests.crashkit import run_child

CFG = dict(segment_size=64 * 1024, max_message_size=4096, checkpoint_interval_ms=0,
           retention_interval_ms=0, tx_check_after_ms=50)
BODIES = [(f"m{i}-" * 100).encode() for i in range(3)]  # 400 bytes: committed by REF

# stage: (phase, arm, open after recovery?, PRE_MESSAGEs recovered, decision the producer
#         gives feedback (None: feedback must offer nothing), committed in the end?)
STAGES = {
    "S1 before PREPARE flush": ("prepare", dict(op="pwrite", mode="before"),
                                     False, 0, None, False),
    # A prepare cut short is incomplete (fewer PRE_MESSAGEs than its PREPARE announced):
    # recovery rolls it back, so feedback never offers it and nobody can commit it.
    "S2 PREPARE durable, before PRE_MESSAGE flush": (
        "prepare", dict(op="pwrite", mode="records", records=1), False, 0, None, False),
    "S3 inside PRE_MESSAGE flush": (
        "prepare", dict(op="pwrite", mode="records", records=2, extra=150), False, 1,
        None, False),
    "S3b PRE_MESSAGEs durable, ack lost": (
        "prepare", dict(op="fdatasync", mode="after"), True, 3, "rollback", False),
    "S4 before REF flush": ("commit", dict(op="pwrite", mode="before"), True, 3,
                                 "commit", True),
    "S5 inside REF flush": ("commit", dict(op="pwrite", mode="records", records=1,
                                                extra=30), False, 3, None, True),
    "S6 before COMMIT flush": ("commit", dict(op="pwrite", mode="records", records=3),
                                    False, 3, None, True),
    "S7 after COMMIT flush": ("commit", dict(op="fdatasync", mode="after"), False, 3,
                                   None, True),
    "S8a before ROLLBACK flush": ("rollback", dict(op="pwrite", mode="before"), True, 3,
                                       "rollback", False),
    "S8b after ROLLBACK flush": ("rollback", dict(op="fdatasync", mode="after"), False,
                                      3, None, False),
}


def all_bodies(b: fmq.Broker) -> list[bytes]:
    assert b.wait_indexed()
    return sorted(m.body for msgs in b.reads.all_messages(["t"]).values() for m in msgs)


@pytest.mark.parametrize("stage", list(STAGES))
def test_crash_at_stage(tmp_path, stage):
    phase, arm, open_after, pre_count, decision, committed = STAGES[stage]
    data = str(tmp_path / "data")
    child = run_child("transaction_stage_crash", data, str(tmp_path / "acks"), cfg=CFG,
                      phase=phase, arm=arm, bodies=[b.decode() for b in BODIES])
    assert child.killed, child.stderr
    events = [a["event"] for a in child.acks]
    assert "committed" not in events and "rolled back" not in events  # killed before the ack
    cfg = fmq.BrokerConfig(**CFG)
    with fmq.Broker.open(data, cfg) as b:
        open_txs = b.transactions.open_transactions()
        assert [t["tx_id"] for t in open_txs] == (["tx-1"] if open_after else [])
        if open_after:
            assert open_txs[0]["messages"] == pre_count
        if stage.startswith(("S5", "S6")):
            assert b.recovery.rolled_forward == ["tx-1"]
        cut_prepare = stage.startswith(("S2", "S3 "))
        assert b.recovery.incomplete_prepares == (["tx-1"] if cut_prepare else [])
        if cut_prepare:
            with pytest.raises(fmq.TransactionConflict):
                b.transactions.commit("tx-1")
            with pytest.raises(fmq.TransactionRolledBack):
                b.transactions.prepare([fmq.Message("t", b"again")], "g", tx_id="tx-1")
            assert b.transactions.rollback("tx-1") == TxState.ROLLBACK
        visible = all_bodies(b)
        expected_now = sorted([b"plain-before"] + (BODIES if committed and not open_after else []))
        assert visible == expected_now  # never a partly visible transaction
        offered = b.transactions.poll_uncertain("g", wait_ms=1000 if decision else 200)
        if decision is None:
            assert offered == []
        else:
            [u] = offered
            assert u.tx_id == "tx-1" and len(u.messages) == pre_count
            assert b.transactions.answer_uncertain("tx-1", TxState(decision)) == TxState(decision)
        final = all_bodies(b)
        assert final == sorted([b"plain-before"] + (BODIES if committed else []))
        assert b.transactions.open_transactions() == []
    with fmq.Broker.open(data, cfg) as b:  # and it stays that way across another restart
        assert all_bodies(b) == final
        assert b.transactions.open_transactions() == []
        if "prepared" in events or open_after:
            expected = TxState.COMMIT if committed else TxState.ROLLBACK
            end = b.transactions.commit if committed else b.transactions.rollback
            assert end("tx-1") == expected
            with pytest.raises(fmq.TransactionConflict):
                (b.transactions.rollback if committed else b.transactions.commit)("tx-1")
