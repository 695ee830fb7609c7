"""The Spark index rebuild derives the topic table from the log's TOPIC records, with a
delete's queue floors raised over the loaded entries, as recovery and ``fmq index
rebuild`` do."""

from __future__ import annotations

import pytest

import fmq
from fmq.spark.rebuild import run_rebuild

from .conftest import small_config

pytestmark = pytest.mark.timeout(600)

COMPARED = ("topics", "queues", "cq", "keys", "keyoff", "time")


def test_a_spark_rebuild_derives_topic_settings_and_deletes(spark, tmp_path):
    data = str(tmp_path / "data")
    with fmq.Broker.open(data, small_config()) as b:
        b.topics.create("orders", queues=3, max_message_size=1000)
        b.topics.create("doomed", queues=2)
        for i in range(150):  # several segments
            b.send(fmq.Message("orders" if i % 2 else "doomed", b"x%d" % i, key=f"k{i % 5}"))
        b.topics.delete("doomed", force=True)
        b.topics.create("doomed")
        b.send(fmq.Message("doomed", b"after", key="k1"))
        b.topics.alter("orders", queues=5)
        b.wait_indexed()
        live = b._index.dump()
        listing = b.topics.list()
    run_rebuild(data, master="local[2]")
    with fmq.Broker.open(data, small_config()) as b:
        assert b.recovery.records_replayed == 0  # the table came from the rebuild
        rebuilt = b._index.dump()
        assert {k: rebuilt[k] for k in COMPARED} == {k: live[k] for k in COMPARED}
        assert b.topics.list() == listing
        assert [m.body for m in b.reads.messages_by_key("doomed", "k1")] == [b"after"]
