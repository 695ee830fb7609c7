"""``df.write`` / ``df.writeStream`` ``.format("fmq-topic")`` against a real ``fmq server``:
every row visible exactly once after a plain write, a task failing on its first attempt
(in the middle of its rows, and after its prepare), and a streaming query whose driver
fails after the sink's commit and is restarted on its checkpoint; bad rows fail the write
with FMQ's typed error and leave nothing visible and nothing open."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fmq.client import Client, Producer
from fmq.protocol import Op
from fmq.spark.sink_commit import TX_PREFIX
from fmq.spark.topic_client import QueueClient
from fmq.spark.topic_source import register
from tests.crashkit import ROOT
from tests.server.harness import ServerProcess

from .standalone import standalone_cluster
from .topic_traffic import QUEUES, SERVER_CONFIG

MAX_MESSAGE = 8192


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    config = {**SERVER_CONFIG, "max_message_size": MAX_MESSAGE}
    srv = ServerProcess(str(tmp_path_factory.mktemp("topic-sink") / "data"), config)
    srv.start()
    yield srv
    srv.kill()


@pytest.fixture(scope="module")
def topics(spark):
    register(spark)
    return spark


def stored(server, topic: str) -> list:
    """Every consumable message of ``topic``, read with the plain client."""
    out = []
    with QueueClient(server.address) as c:
        for q in range(QUEUES):
            lo, hi = c.queue_range(topic, q)
            for msgs in c.read_range(topic, q, lo, hi):
                out.extend(msgs)
    return out


def open_sink_transactions(server) -> list[str]:
    with Client(server.address) as c:
        return [t["tx_id"] for t in c.call(Op.LIST_TX, {})["transactions"]
                if t["tx_id"].startswith(TX_PREFIX)]


def test_batch_write_stores_every_row_once_with_its_columns(topics, server):
    spark = topics
    rows = [(f"k{i % 4}", f"body-{i}".encode(), "tagA" if i % 2 else None,
             {"n": str(i)} if i % 3 else None, "sink-a" if i % 2 else "sink-b")
            for i in range(120)]
    df = spark.createDataFrame(
        rows, "key string, body binary, tags string, properties map<string,string>, "
              "topic string").repartition(3)
    df.write.format("fmq-topic").option("servers", server.address).mode("append").save()
    # A string body and the topic as an option, with an explicit queue.
    strings = spark.createDataFrame([(f"text-{i}", 2) for i in range(10)],
                                    "body string, queue_id int")
    (strings.write.format("fmq-topic").option("servers", server.address)
     .option("topic", "sink-c").mode("append").save())

    got = {bytes(m.body): m for t in ("sink-a", "sink-b") for m in stored(server, t)}
    assert len(got) == 120 and sum(len(stored(server, t)) for t in ("sink-a", "sink-b")) == 120
    for key, body, tags, props, topic in rows:
        m = got[body]
        assert (m.topic, m.key, m.tags) == (topic, key, tags)
        assert {k: v for k, v in m.properties.items() if not k.startswith("_")} == (props or {})
    texts = stored(server, "sink-c")
    assert sorted(bytes(m.body) for m in texts) == sorted(f"text-{i}".encode()
                                                          for i in range(10))
    assert {m.queue_id for m in texts} == {2}
    assert open_sink_transactions(server) == []


def _child(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.spark.sink_jobs", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(600)  # a child session of its own
def test_task_failing_on_its_first_attempt_writes_once(server):
    run = _child("retry", server.address, "sink-retry", "300")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    bodies = sorted(bytes(m.body) for m in stored(server, "sink-retry"))
    assert bodies == sorted(f"r-{i}".encode() for i in range(300))
    assert open_sink_transactions(server) == []


@pytest.mark.timeout(900)  # a standalone cluster (master, two workers, two executors)
def test_a_speculative_copy_of_a_task_writes_once(server, tmp_path):
    """Attempt 0 of partition 0 prepares its rows and stalls; Spark's speculation runs a
    copy on the other worker, which prepares the same rows and finishes first. The driver
    commits one of the two and rolls back the other: every row once."""
    marks = tmp_path / "marks"
    marks.mkdir()
    with standalone_cluster(str(tmp_path)) as master:
        run = _child("speculate", server.address, "sink-speculated", "400", master,
                     str(marks))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    attempts = [json.loads(Path(p).read_text()) for p in glob.glob(str(marks / "*.json"))]
    copies = [a for a in attempts if a["partition"] == 0]
    # Both attempts of partition 0 prepared a transaction: the copy did run.
    assert sorted(a["attempt"] for a in copies) == [0, 1], attempts
    assert all(a["transactions"] for a in copies)
    bodies = sorted(bytes(m.body) for m in stored(server, "sink-speculated"))
    assert bodies == sorted(f"s-{i}".encode() for i in range(400))
    assert open_sink_transactions(server) == []


@pytest.mark.timeout(900)  # two child sessions of their own, micro-batch by micro-batch
def test_streaming_query_restarted_after_its_commit_writes_once(server, tmp_path):
    with Producer(server.address) as p:
        for i in range(120):
            p.send("pipe-in", f"event-{i}".encode(), key=f"u{i % 7}")
    checkpoint = str(tmp_path / "checkpoint")
    env_first = {**os.environ, "FMQ_SINK_FAIL_AFTER": "1"}
    first = subprocess.run([sys.executable, "-m", "tests.spark.sink_jobs", "stream",
                            server.address, "pipe-in", "pipe-out", checkpoint], cwd=ROOT,
                           capture_output=True, text=True, timeout=400, env=env_first)
    assert first.returncode == 3, first.stdout[-3000:] + first.stderr[-3000:]
    assert "the driver dies after the commit of 1" in first.stdout
    # Batches 0 and 1 were committed to FMQ; Spark's commit log lacks batch 1.
    assert len(stored(server, "pipe-out")) == 100
    second = _child("stream", server.address, "pipe-in", "pipe-out", checkpoint)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    out = stored(server, "pipe-out")
    assert sorted(bytes(m.body) for m in out) == sorted(f"EVENT-{i}".encode()
                                                        for i in range(120))
    assert len({m.properties["from"] for m in out}) == 120
    assert open_sink_transactions(server) == []


@pytest.mark.parametrize(("bad", "error"), [
    ("body", "MessageTooLarge"),
    ("topic", "InvalidArgument"),
])
def test_bad_row_fails_the_write_and_leaves_nothing(topics, server, bad, error):
    spark = topics
    topic = f"sink-bad-{bad}"
    rows = [(topic, b"x" * 10) for _ in range(40)]
    rows[25] = ((topic, b"y" * (MAX_MESSAGE + 1)) if bad == "body"
                else ("no spaces allowed/..", b"z"))
    df = spark.createDataFrame(rows, "topic string, body binary").repartition(2)
    with pytest.raises(Exception) as failed:
        df.write.format("fmq-topic").option("servers", server.address).mode("append").save()
    assert error in str(failed.value)
    assert stored(server, topic) == []
    assert open_sink_transactions(server) == []


def test_a_task_preparing_after_a_failed_writes_first_sweep_is_rolled_back(server):
    """The race a failed batch write met in CI: Spark kills the other tasks of a failed
    job while the driver's ``abort`` runs, so a task can prepare after its sweep. Here a
    task of the write prepares one second into ``abort`` (the writer's own driver-side
    object and the task's own function, no Spark job needed to place the PREPARE there):
    nothing of it may stay open."""
    from pyspark.sql import Row
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from fmq.spark.topic_sink import TopicBatchWriter, _prepare_task

    topic = "sink-late-task"
    schema = StructType([StructField("topic", StringType()), StructField("body", BinaryType())])
    writer = TopicBatchWriter({"servers": server.address, "abortGraceMs": "3000"}, schema)
    rows = [Row(topic=topic, body=b"late")] * 3
    prepared: list = []

    def late_task() -> None:
        time.sleep(1.0)  # after abort's first sweep, within its grace
        prepared.append(_prepare_task(writer.opts, iter(rows), writer.write_id, 0, "w"))

    task = threading.Thread(target=late_task)
    task.start()
    writer.abort([])
    task.join(timeout=30)
    assert prepared and prepared[0].transactions, "the late task did not prepare"
    assert open_sink_transactions(server) == []
    assert stored(server, topic) == []
