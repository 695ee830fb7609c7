"""``spark.readStream.format("fmq-topic")`` against a real ``fmq server``: a query killed
with SIGKILL mid-stream and restarted on its checkpoint leaves every committed message in
its file sink exactly once and nothing else; ``maxMessagesPerTrigger`` and
``availableNow``; ``latest`` as the start; a transaction's messages are in one snapshot
of the queue ends."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

import fmq
from fmq.client import Producer, TransactionProducer
from fmq.spark.topic_groups import GroupClients
from fmq.spark.topic_offsets import consistent_ranges
from fmq.spark.topic_source import register
from tests.crashkit import ROOT
from tests.server.harness import ServerProcess

from .topic_traffic import QUEUES, SERVER_CONFIG, BackgroundTraffic, Traffic, send_round

TOPICS = ("clicks", "sales")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServerProcess(str(tmp_path_factory.mktemp("topic-stream") / "data"), SERVER_CONFIG)
    srv.start()
    yield srv
    srv.kill()


@pytest.fixture(scope="module")
def topics(spark):
    register(spark)
    return spark


class QueryProcess:
    """The child workload running a streaming query; its stdout goes to a file."""

    def __init__(self, address: str, topics: str, checkpoint: str, sink: str, out: str) -> None:
        self.out = out
        with open(out, "w") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.workloads.topic_stream_query", address, topics,
                 checkpoint, sink], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)

    def batches(self) -> list[tuple[int, int]]:
        with open(self.out) as f:
            return [(int(p[1]), int(p[2])) for p in (line.split() for line in f)
                    if len(p) == 3 and p[0] == "batch"]

    def wait_for_rows(self, batches_with_rows: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, open(self.out).read()
            if sum(1 for _b, rows in self.batches() if rows > 0) >= batches_with_rows:
                return
            time.sleep(0.2)
        raise AssertionError(f"no {batches_with_rows} batches with rows in {timeout}s:\n"
                             + open(self.out).read())

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL


def _sink_bodies(spark, sink: str) -> list[bytes]:
    # The file sink's own log (_spark_metadata) lists the files of committed batches only.
    return [bytes(r.body) for r in spark.read.parquet(sink).select("body").collect()]


def test_killed_query_restarts_with_no_loss_and_no_duplicate(topics, server, tmp_path):
    checkpoint, sink = str(tmp_path / "checkpoint"), str(tmp_path / "sink")
    args = (server.address, ",".join(TOPICS), checkpoint, sink)
    # Rounds until stopped (the bound only keeps a broken test finite).
    producer = BackgroundTraffic(server.address, TOPICS, rounds=5000, pause=0.5)
    try:
        first = QueryProcess(*args, str(tmp_path / "q1.out"))
        first.wait_for_rows(2, timeout=180)
        first.kill()  # mid-stream: the producer is still sending
        second = QueryProcess(*args, str(tmp_path / "q2.out"))
        second.wait_for_rows(1, timeout=180)
        assert producer.rounds_sent < 5000 and producer.error is None
    finally:
        producer.stop()
    traffic = producer.traffic
    try:
        deadline = time.monotonic() + 180
        bodies = _sink_bodies(topics, sink)
        while not traffic.committed <= set(bodies) and time.monotonic() < deadline:
            time.sleep(1)
            bodies = _sink_bodies(topics, sink)
    finally:
        second.kill()  # killed again: what a batch wrote but did not commit is not counted
    bodies = _sink_bodies(topics, sink)
    assert not set(bodies) & traffic.forbidden
    assert len(bodies) == len(set(bodies)), "a message is in the sink twice"
    assert set(bodies) == traffic.committed
    rows = topics.read.parquet(sink).select("topic", "queue_id", "queue_offset").collect()
    assert len(rows) == len(set(rows)) == len(bodies)


def _stream(spark, server, topics: tuple[str, ...], **options):
    reader = (spark.readStream.format("fmq-topic").option("servers", server.address)
              .option("subscribe", ",".join(topics)))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_max_messages_per_trigger_with_available_now(topics, server, tmp_path):
    capped = ("capped_a", "capped_b")  # topics of this test only
    traffic = Traffic()
    send_round(server.address, capped, 0, traffic)  # 17 messages
    query = (_stream(topics, server, capped, startingOffsets="earliest",
                     maxMessagesPerTrigger="7")
             .writeStream.format("memory").queryName("capped")
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(180), "availableNow did not finish"
    finally:
        query.stop()
    assert query.exception() is None
    per_batch = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(per_batch) == 7 and len(per_batch) == 3
    bodies = [bytes(r.body) for r in topics.sql("select body from capped").collect()]
    assert len(bodies) == len(set(bodies)) == sum(per_batch)
    assert set(bodies) == traffic.committed
    assert not set(bodies) & traffic.forbidden


def test_latest_start_reads_only_what_comes_after(topics, server, tmp_path):
    late = ("late_a", "late_b")  # topics of this test only
    with Producer(server.address) as p:
        p.send(late[0], b"before-the-query")
    query = (_stream(topics, server, late).writeStream.format("memory").queryName("fromlatest")
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        deadline = time.monotonic() + 120
        while not query.recentProgress and time.monotonic() < deadline:
            time.sleep(0.1)  # the first trigger has read the start offsets
        assert query.recentProgress, "the query never triggered"
        with Producer(server.address) as p:
            sent = {f"after-{i}".encode() for i in range(5)}
            for body in sorted(sent):
                p.send(late[1], body)
        got: set = set()
        while got != sent and time.monotonic() < deadline:
            time.sleep(0.2)
            got = {bytes(r.body) for r in topics.sql("select body from fromlatest").collect()}
        assert got == sent
    finally:
        query.stop()


def test_a_transaction_is_in_one_snapshot_of_queue_ends(server):
    """A committed transaction with one message in each queue: every snapshot of the
    queue ends taken while such transactions commit has all queues at the same count."""
    topic = "snapshots"
    stop = threading.Event()
    errors: list[BaseException] = []

    def commit_loop() -> None:
        try:
            with TransactionProducer(server.address, "snapshots", lambda u: fmq.TxState.UNKNOWN,
                                     feedback=False) as tp:
                for i in range(30):
                    if stop.is_set():
                        return
                    tx = tp.prepare([fmq.Message(topic, f"{i}-{q}".encode(), queue_id=q)
                                     for q in range(QUEUES)])
                    seen = len(snapshots)
                    tp.commit(tx)
                    # Let a snapshot be taken between two commits (bounded): on a loaded
                    # machine the commits could otherwise all land between two snapshots.
                    pace = time.monotonic() + 10
                    while len(snapshots) <= seen + 1 and time.monotonic() < pace:
                        time.sleep(0.005)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    snapshots: list[list[int]] = []
    committer = threading.Thread(target=commit_loop, daemon=True)
    committer.start()
    try:
        with GroupClients(server.address) as clients:
            while committer.is_alive() and len(snapshots) < 100_000:
                ranges = consistent_ranges(clients, [topic])
                snapshots.append([ranges[(topic, str(q))][1] for q in range(QUEUES)])
    finally:
        stop.set()
        committer.join(60)
    assert not errors, errors
    assert len({s[0] for s in snapshots}) > 5, "no commit happened while snapshots were taken"
    torn = [s for s in snapshots if len(set(s)) != 1]
    assert not torn, f"snapshots with a transaction half in: {torn[:5]}"


