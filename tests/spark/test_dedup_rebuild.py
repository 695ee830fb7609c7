"""The Spark index rebuild keeps what the dedup window of idempotent sends needs: its
checkpoint lets the broker replay the idempotent sends still in the window, so a resend
after the rebuild gets the original's result and the window equals the live one."""

from __future__ import annotations

import pytest

import fmq
from fmq.message import MESSAGE_ID_PROPERTY, PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY
from fmq.recovery.checkpoint import read_checkpoint
from fmq.spark.rebuild import run_rebuild

from .conftest import small_config

pytestmark = pytest.mark.timeout(600)


def idem(body: bytes, seq: int) -> fmq.Message:
    return fmq.Message("orders", body, properties={PRODUCER_ID_PROPERTY: "p",
                                                   SEQUENCE_PROPERTY: str(seq)})


def test_a_spark_rebuild_keeps_the_dedup_window(spark, tmp_path):
    data = str(tmp_path / "data")
    with fmq.Broker.open(data, small_config()) as b:
        first = b.send(idem(b"first", 0))
        keyed = b.send(fmq.Message("orders", b"keyed", properties={MESSAGE_ID_PROPERTY: "k"}))
        for i in range(300):  # segments of plain traffic after them
            b.send(fmq.Message("audit", b"x%d" % i))
        b.send(idem(b"second", 1))
        live = b._idempotence.window.snapshot()
    result = run_rebuild(data, master="local[2]")
    assert read_checkpoint(result["checkpoint_file"]).recovery_offset == first.offset
    with fmq.Broker.open(data, small_config()) as b:
        assert b._idempotence.window.snapshot() == live
        assert b.send(idem(b"first", 0)) == first
        assert b.send(fmq.Message("orders", b"keyed",
                                  properties={MESSAGE_ID_PROPERTY: "k"})) == keyed
        b.wait_indexed()
        assert sorted(m.body for q in b.reads.all_messages(["orders"]).values() for m in q) == [
            b"first", b"keyed", b"second"]
