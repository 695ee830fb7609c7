"""Issue 14, item 3 after a Spark rebuild: the queue count of a topic comes back from the
log, so a lower ``queues_per_topic`` hides nothing even when the index was rebuilt."""

from __future__ import annotations

import os
import shutil

import fmq
from fmq.datadir import INDEX_DIR
from fmq.spark.rebuild import run_rebuild

from .conftest import small_config


def test_spark_rebuilt_index_keeps_every_queue_of_a_topic(spark, tmp_path):
    path = str(tmp_path / "data")
    with fmq.Broker.open(path, small_config(queues_per_topic=4)) as b:
        for i in range(4):
            b.send(fmq.Message("orders", f"m{i}".encode()))
    shutil.rmtree(os.path.join(path, INDEX_DIR))
    run_rebuild(path, master="local[2]")
    with fmq.Broker.open(path, small_config(queues_per_topic=2)) as b:
        b.wait_indexed()
        got = sorted(m.body for msgs in b.reads.all_messages(["orders"]).values() for m in msgs)
        assert got == [b"m0", b"m1", b"m2", b"m3"]
        assert b.topics.queue_count("orders") == 4
