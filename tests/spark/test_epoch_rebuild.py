"""The Spark index rebuild fills the epoch history from the log's EPOCH records, as
recovery and ``fmq index rebuild`` do."""

from __future__ import annotations

import pytest

import fmq
from fmq.replication.term import start_term
from fmq.spark.rebuild import run_rebuild

from .conftest import small_config

pytestmark = pytest.mark.timeout(600)


def test_a_spark_rebuild_keeps_the_epoch_history(spark, tmp_path):
    data = str(tmp_path / "data")
    with fmq.Broker.open(data, small_config()) as b:
        b.send(fmq.Message("orders", b"epoch 0"))
        start_term(b, 2, "node-a")
        for i in range(200):  # several segments, the second term in a later one
            b.send(fmq.Message("orders", b"x%d" % i))
        start_term(b, 5, "node-b")
        b.send(fmq.Message("orders", b"epoch 5"))
        live = b._index.epoch_history()
    assert [e.epoch for e in live] == [2, 5]
    run_rebuild(data, master="local[2]")
    with fmq.Broker.open(data, small_config()) as b:
        assert b.recovery.records_replayed == 0  # the history came from the rebuild
        assert b._index.epoch_history() == live
