"""``df.write`` / ``df.writeStream`` ``.format("fmq-topic")`` against a real ``fmq server``:
every row visible exactly once after a plain write, a task failing on its first attempt
(in the middle of its rows, and after its prepare), and a streaming query whose driver
fails after the sink's commit and is restarted on its checkpoint; bad rows fail the write
with FMQ's typed error and leave nothing visible and nothing open."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fmq.client import Client, Producer
from fmq.protocol import Op
from fmq.spark.sink_commit import TX_PREFIX
from fmq.spark.topic_client import QueueClient
from fmq.spark.topic_source import register
from tests.crashkit import ROOT
from tests.server.harness import ServerProcess, broker_stats, wait_until

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


LATE_SCHEMA = "topic string, body binary"


def _late_task(spark, address: str, write_id: str, topic: str, bodies: list[bytes]) -> dict:
    """A task of the write ``write_id`` run now, in a real Spark task (its own partition
    and attempt id): a speculative copy preparing after its write's commit, or a task
    Spark was still killing preparing after its write's abort. Returns what its prepare
    did: ``{"prepared": [ids]}`` or ``{"refused": error class, "message": text}``."""
    from pyspark.sql import Row
    from pyspark.sql.types import _parse_datatype_string

    schema = _parse_datatype_string(LATE_SCHEMA)
    rows = [Row(topic=topic, body=b) for b in bodies]

    def run(_partition):
        from fmq.errors import FMQError
        from fmq.spark.topic_sink import _prepare_task, _SinkOptions

        opts = _SinkOptions({"servers": address}, schema)
        try:  # batch 0, run "w": a batch write's (fmq.spark.sink_commit.TxName)
            done = _prepare_task(opts, iter(rows), write_id, 0, "w")
            yield json.dumps({"prepared": [t.tx_id for t in done.transactions]})
        except FMQError as exc:
            yield json.dumps({"refused": type(exc).__name__, "message": str(exc)})

    return json.loads(spark.sparkContext.parallelize([0], 1).mapPartitions(run).collect()[0])


def _kept_write(spark, address: str, keep: Path, topic: str, bodies: list[bytes]) -> str:
    """A real batch write of ``bodies`` in 2 tasks (the test sink keeps its write id in
    ``keep``); returns the write id. Raises what the write raised."""
    from .sink_jobs import KeptIdSink

    spark.dataSource.register(KeptIdSink)
    df = spark.createDataFrame([(topic, b) for b in bodies], LATE_SCHEMA).repartition(2)
    try:
        (df.write.format("fmq-topic-kept").option("servers", address)
         .option("keep", str(keep)).mode("append").save())
    finally:
        assert keep.exists(), "the write did not plan its writer"
    return keep.read_text()


def _assert_refused(late: dict) -> None:
    assert late.get("refused") == "TransactionScopeClosed", late
    assert "closed" in late["message"] and "nothing of it is stored" in late["message"]


def test_a_task_preparing_after_its_failed_write_is_refused(topics, server, tmp_path):
    """A batch write fails (a bad row); a task of it prepares after the driver's abort
    returned (Spark was still killing it): the broker refuses the prepare, nothing of the
    write is visible, nothing is left open. Before the end mark the late prepare was
    stored and stayed open, invisible, until ``fmq tx resolve``."""
    topic = "sink-late-abort"
    bodies = [b"x" * 10] * 30 + [b"y" * (MAX_MESSAGE + 1)]
    keep = tmp_path / "write-id"
    with pytest.raises(Exception, match="MessageTooLarge"):
        _kept_write(topics, server.address, keep, topic, bodies)
    late = _late_task(topics, server.address, keep.read_text(), topic, [b"late"] * 3)
    _assert_refused(late)
    assert open_sink_transactions(server) == []
    assert stored(server, topic) == []


def test_a_speculative_copy_preparing_after_the_commit_is_refused(topics, server, tmp_path):
    """A batch write commits; a copy of one of its tasks prepares afterwards (a
    speculative copy Spark had not killed yet): refused, every row once, nothing open."""
    topic = "sink-late-commit"
    bodies = [f"c-{i}".encode() for i in range(40)]
    write_id = _kept_write(topics, server.address, tmp_path / "write-id", topic, bodies)
    late = _late_task(topics, server.address, write_id, topic, bodies[:20])
    _assert_refused(late)
    assert open_sink_transactions(server) == []
    assert sorted(bytes(m.body) for m in stored(server, topic)) == sorted(bodies)


@pytest.fixture
def own_server(tmp_path):
    config = {**SERVER_CONFIG, "max_message_size": MAX_MESSAGE}
    srv = ServerProcess(str(tmp_path / "data"), config)
    srv.start()
    yield srv
    srv.kill()


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_the_end_mark_survives_a_server_kill(topics, own_server, tmp_path, end):
    """The write's end mark is in the log: the server is killed with SIGKILL right after
    the write ended and started again on its data directory; a late task of the write is
    still refused, every row is there once (after a commit) or none (after an abort),
    nothing is open."""
    topic = f"sink-late-kill-{end}"
    bodies = [f"k-{i}".encode() for i in range(40)]
    if end == "abort":
        bodies.append(b"y" * (MAX_MESSAGE + 1))
    keep = tmp_path / "write-id"
    if end == "abort":
        with pytest.raises(Exception, match="MessageTooLarge"):
            _kept_write(topics, own_server.address, keep, topic, bodies)
    else:
        _kept_write(topics, own_server.address, keep, topic, bodies)
    own_server.kill()
    own_server.start()
    late = _late_task(topics, own_server.address, keep.read_text(), topic, bodies[:10])
    _assert_refused(late)
    assert open_sink_transactions(own_server) == []
    expected = sorted(bodies) if end == "commit" else []
    assert sorted(bytes(m.body) for m in stored(own_server, topic)) == expected


def test_a_later_batch_write_rolls_back_what_a_closed_write_left_open(topics, server):
    """A write whose driver was lost between its end mark and its sweep leaves a
    transaction open; the next batch write of the producer group finds its scope closed
    and rolls it back. A transaction of a write still running (scope not closed) stays."""
    from fmq.spark.sink_commit import Committer, Prepared, TxName

    topic = "sink-leftover"
    lost, running = "0123456789abcdef", "fedcba9876543210"
    left = _late_task(topics, server.address, lost, topic, [b"lost"])["prepared"]
    alive = _late_task(topics, server.address, running, topic, [b"running"])["prepared"]
    with Committer(server.address, "fmq-spark", {}, [topic]) as c:
        c.close(TxName(lost, 0, "w", 0, 0).scope, "aborted")  # its sweep never ran
    assert set(open_sink_transactions(server)) == {*left, *alive}
    (topics.createDataFrame([(f"n-{i}".encode(),) for i in range(5)], "body binary")
     .write.format("fmq-topic").option("servers", server.address).option("topic", topic)
     .mode("append").save())
    assert open_sink_transactions(server) == alive
    with Committer(server.address, "fmq-spark", {}, [topic]) as c:
        c.rollback_all([Prepared(alive[0])])
    assert sorted(bytes(m.body) for m in stored(server, topic)) == [
        f"n-{i}".encode() for i in range(5)]


def test_a_later_batch_write_rolls_back_an_end_mark_left_open(topics, server):
    """A driver lost between its end mark's PREPARE and ROLLBACK leaves the mark open (the
    broker cannot tell a mark from any other transaction, so its check-back asks about
    it): the next batch write of the producer group rolls it back. Before, a mark was
    only ended by a later write that found a leftover of its scope, and the check-back
    now rolls those back itself."""
    from fmq.message import Message
    from fmq.spark.sink_commit import Committer, TxName

    topic = "sink-open-mark"
    mark = TxName("00112233445566aa", 0, "w", 0, 0).scope
    with Committer(server.address, "fmq-spark", {}, [topic]) as c:
        c.producer.prepare([Message(topic, b"committed")], tx_id=mark)  # then it died
    assert open_sink_transactions(server) == [mark]
    (topics.createDataFrame([(f"m-{i}".encode(),) for i in range(5)], "body binary")
     .write.format("fmq-topic").option("servers", server.address).option("topic", topic)
     .mode("append").save())
    assert open_sink_transactions(server) == []
    assert sorted(bytes(m.body) for m in stored(server, topic)) == [
        f"m-{i}".encode() for i in range(5)]

@pytest.mark.timeout(600)  # a child session of its own, killed with SIGKILL
def test_a_driver_killed_between_its_end_mark_and_its_sweep_leaves_nothing_open(tmp_path):
    """The driver commits the winners, closes the write's scope and is killed (SIGKILL,
    its JVM and workers with it) before its sweep: the transaction of a task attempt lost
    after its prepare is left open in the closed scope, and no later write comes. The
    server's check-back rolls it back within its interval; every row is there once. Before
    the check-back knew of scopes it stayed open (until a next batch write of the producer
    group or ``fmq tx resolve``)."""
    config = {**SERVER_CONFIG, "max_message_size": MAX_MESSAGE, "tx_check_after_ms": 1000,
              "tx_check_max_interval_ms": 2000}
    srv = ServerProcess(str(tmp_path / "data"), config)
    srv.start()
    try:
        marker = tmp_path / "killed-before-sweep"
        local_dir = tmp_path / "spark-local"
        local_dir.mkdir()
        run = subprocess.run(
            [sys.executable, "-m", "tests.spark.sink_jobs", "lost-sweep", srv.address,
             "sink-lost-sweep", "300", str(local_dir)],
            cwd=ROOT, capture_output=True, text=True, timeout=400, start_new_session=True,
            env={**os.environ, "FMQ_SINK_KILL_BEFORE_SWEEP": str(marker)})
        assert run.returncode == -signal.SIGKILL, run.stdout[-3000:] + run.stderr[-3000:]
        assert marker.exists(), "the driver was not killed at its crash point"
        wait_until(lambda: open_sink_transactions(srv) == [], 60,
                   "the closed write's leftover to be rolled back")
        assert broker_stats(srv.address)["tx_closed_scope_rollbacks"] >= 1
        assert "is closed" in srv.log()
        bodies = sorted(bytes(m.body) for m in stored(srv, "sink-lost-sweep"))
        assert bodies == sorted(f"l-{i}".encode() for i in range(300))
    finally:
        srv.kill()
