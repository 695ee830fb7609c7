"""``spark.read.format("fmq-topic")`` against a real ``fmq server``: every consumable
message once, nothing of open or rolled-back transactions, the columns, one partition per
queue range, the start and end options, and clear errors for bad options."""

from __future__ import annotations

import json
import time

import pytest

from fmq.client import Producer
from fmq.spark.topic_client import QueueClient, TopicDataLost
from fmq.spark.topic_source import TopicBatchReader, register
from tests.server.harness import ServerProcess

from .topic_traffic import QUEUES, SERVER_CONFIG, Traffic, send_round

TOPICS = ("orders", "payments")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServerProcess(str(tmp_path_factory.mktemp("topic-batch") / "data"), SERVER_CONFIG)
    srv.start()
    yield srv
    srv.kill()


@pytest.fixture(scope="module")
def traffic(server) -> Traffic:
    t = Traffic()
    for r in range(3):
        send_round(server.address, TOPICS, r, t)
    return t


@pytest.fixture(scope="module")
def topics(spark, traffic):
    register(spark)
    return spark


def read(spark, server, **options):
    reader = spark.read.format("fmq-topic").option("servers", server.address)
    reader = reader.option("subscribe", ",".join(TOPICS))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_reads_every_committed_message_once_and_nothing_else(topics, server, traffic):
    rows = read(topics, server).collect()
    bodies = [bytes(r.body) for r in rows]
    assert sorted(bodies) == sorted(traffic.committed)
    assert not set(bodies) & traffic.forbidden
    # Queue offsets of a queue are dense from 0: nothing skipped, nothing twice.
    by_queue: dict = {}
    for r in rows:
        by_queue.setdefault((r.topic, r.queue_id), []).append(r.queue_offset)
    for offs in by_queue.values():
        assert sorted(offs) == list(range(len(offs)))


def test_columns_are_the_stored_message(topics, server, traffic):
    df = read(topics, server)
    assert df.columns == ["topic", "queue_id", "queue_offset", "offset", "key", "tags",
                          "properties", "store_time", "body", "group", "store_time_ms"]
    assert dict(df.dtypes)["store_time"] == "timestamp"
    now_ms = time.time() * 1000
    for r in df.collect():
        body = bytes(r.body)
        if body in traffic.plain:
            sent = traffic.plain[body]
            assert (r.offset, r.queue_id, r.queue_offset) == \
                (sent.offset, sent.queue_id, sent.queue_offset)
            i = int(body.decode().rsplit("-", 1)[1])
            assert r.key == f"k{i % 3}" and r.tags == ("t" if i % 2 else None)
            assert r.properties == ({"i": str(i)} if i % 3 == 0 else {})
            assert r.topic == body.decode().split("-")[1]
        assert now_ms - 600_000 < r.store_time_ms <= now_ms
        # the same instant as a timestamp (Spark gives it as a naive local datetime)
        assert round(r.store_time.timestamp() * 1000) == r.store_time_ms
        assert r.group is None  # a server outside a cluster


def test_one_partition_per_queue_with_messages(topics, server, traffic):
    df = read(topics, server)
    queues = {(r.topic, r.queue_id) for r in df.select("topic", "queue_id").collect()}
    assert df.rdd.getNumPartitions() == len(queues)
    # The transaction put one message in every queue of the first topic.
    assert {(TOPICS[0], q) for q in range(QUEUES)} <= queues


def test_starting_and_ending_offsets_per_queue(topics, server, traffic):
    start = {"orders": {"0": 1, "1": -1}}
    end = {"orders": {"0": 2, "2": 1}, "payments": {"3": 0}}
    rows = read(topics, server, startingOffsets=json.dumps(start),
                endingOffsets=json.dumps(end)).collect()
    everything = read(topics, server).collect()
    want = set()
    for r in everything:
        lo = {("orders", 0): 1}.get((r.topic, r.queue_id), 0)
        if (r.topic, r.queue_id) == ("orders", 1):
            continue  # starts at latest: nothing
        hi = {("orders", 0): 2, ("orders", 2): 1, ("payments", 3): 0}.get(
            (r.topic, r.queue_id), 10**9)
        if lo <= r.queue_offset < hi:
            want.add((r.topic, r.queue_id, r.queue_offset))
    got = [(r.topic, r.queue_id, r.queue_offset) for r in rows]
    assert sorted(got) == sorted(want) and want


def test_starting_timestamp_skips_older_messages(topics, server, traffic, tmp_path):
    time.sleep(0.05)  # store times are in ms: the cut falls between the two sends
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    with Producer(server.address) as p:
        p.send("orders", b"after-the-cut", queue_id=1)
    rows = read(topics, server, startingTimestamp=str(cut)).collect()
    assert [bytes(r.body) for r in rows] == [b"after-the-cut"]
    assert rows[0].store_time_ms >= cut


@pytest.mark.parametrize(("options", "says"), [
    ({"servers": None}, "needs the option servers"),
    ({"subscribe": None}, "needs the option subscribe"),
    ({"subscribe": "bad topic!"}, "topic"),
    ({"startingOffsets": "{not json"}, "not valid JSON"),
    ({"startingOffsets": "newest"}, "must be earliest or latest or per-queue JSON"),
    ({"startingOffsets": '{"other": {"0": 1}}'}, "not in subscribe"),
    ({"startingOffsets": '{"orders": {"9": 1}}'}, "does not exist"),
    ({"startingOffsets": '{"orders": {"0": 99999}}'}, "past the queue's end"),
    ({"endingOffsets": "earliest"}, "must be latest or per-queue JSON"),
    ({"startingTimestamp": "yesterday"}, "milliseconds since the epoch"),
    ({"startingTimestamp": "1", "startingOffsets": "earliest"}, "not both"),
    ({"maxMessagesPerTrigger": "5"}, "streaming option"),
    ({"startingOffsets": '{"orders": {"0": 3}}', "endingOffsets": '{"orders": {"0": 1}}'},
     "before its starting offset"),
])
def test_bad_options_are_refused_with_a_clear_message(topics, server, options, says):
    reader = topics.read.format("fmq-topic")
    base = {"servers": server.address, "subscribe": ",".join(TOPICS)}
    for k, v in {**base, **options}.items():
        if v is not None:
            reader = reader.option(k, v)
    with pytest.raises(Exception) as info:
        reader.load().collect()
    assert says in str(info.value)


def test_a_server_that_lost_planned_messages_fails_the_read(tmp_path):
    """A range planned on one server and read from a server whose data was replaced
    (same address, empty data directory) fails with TopicDataLost instead of returning
    fewer rows than planned."""
    first = ServerProcess(str(tmp_path / "first"), SERVER_CONFIG).start()
    try:
        with Producer(first.address) as p:
            for i in range(5):
                p.send("lost", f"m{i}".encode(), queue_id=2)
        reader = TopicBatchReader({"servers": first.address, "subscribe": "lost"})
        (part,) = reader.partitions()
        assert (part.queue_id, part.start, part.end) == (2, 0, 5)
    finally:
        first.kill()
    second = ServerProcess(str(tmp_path / "second"), SERVER_CONFIG, port=first.port).start()
    try:
        with pytest.raises(TopicDataLost, match="no message at offset 0"):
            list(reader.read(part))
    finally:
        second.kill()


def test_messages_retention_deleted_before_the_read_are_skipped(tmp_path):
    """A range planned from offset 0, read after retention deleted the oldest segments:
    the read starts at the queue's new first message and returns the rest once each."""
    config = {**SERVER_CONFIG, "segment_size": 16 * 1024, "max_message_size": 4096,
              "retention_bytes": 40 * 1024, "retention_interval_ms": 100,
              "dedup_window_ms": 1}  # idempotent sends would keep their segment meanwhile
    srv = ServerProcess(str(tmp_path / "data"), config).start()
    try:
        with Producer(srv.address) as p:  # about 5 segments, each holding some of "kept"
            for i in range(20):
                p.send("kept", f"early-{i}".encode().ljust(500, b"."), queue_id=1)
                for _ in range(4):
                    p.send("filler", b"f" * 500)
        reader = TopicBatchReader({"servers": srv.address, "subscribe": "kept",
                                   "startingOffsets": '{"kept": {"1": 0}}'})
        (part,) = reader.partitions()
        assert (part.start, part.end) == (0, 20)
        with QueueClient(srv.address) as client:
            deadline = time.monotonic() + 30
            while client.queue_range("kept", 1)[0] == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            first = client.queue_range("kept", 1)[0]
        assert 0 < first < 20, "retention deleted none or all of the planned range"
        rows = [m for batch in reader.read(part) for m in batch.to_pylist()]
        assert [r["queue_offset"] for r in rows] == list(range(first, 20))
        assert rows[0]["body"].startswith(f"early-{first}".encode())
    finally:
        srv.kill()


def test_reads_from_a_server_with_tls_and_users(topics, tmp_path):
    """The source's tls, caFile, user and passwordFile options reach the driver's and
    every task's client; without TLS the query fails saying so."""
    import trustme

    from fmq.client.tls import TLSOptions
    from tests.security.conftest import PASSWORD, add_rule_offline, add_user_offline

    ca = trustme.CA()
    ca_file, cert_file = str(tmp_path / "ca.pem"), str(tmp_path / "server.pem")
    ca.cert_pem.write_to_path(ca_file)
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(cert_file)
    data = str(tmp_path / "data")
    add_user_offline(data, "reader")
    for kind in ("--cluster", "--topic"):
        add_rule_offline(data, "--principal", "reader", "--operation", "all", kind,
                         *(("", "--prefix") if kind == "--topic" else ()))
    login = {"tls": TLSOptions(ca_file=ca_file), "user": "reader", "password": PASSWORD}
    srv = ServerProcess(data, {**SERVER_CONFIG, "server": {"tls_cert_file": cert_file}},
                        client_options=login).start()
    try:
        with Producer(srv.address, **login) as p:
            for i in range(10):
                p.send("secured", f"s-{i}".encode())
        password_file = tmp_path / "password"
        password_file.write_text(PASSWORD)
        def reader():  # a new one each time: DataFrameReader.option changes the reader
            return (topics.read.format("fmq-topic").option("servers", srv.address)
                    .option("subscribe", "secured").option("user", "reader")
                    .option("passwordFile", str(password_file)))

        rows = reader().option("tls", "true").option("caFile", ca_file).load().collect()
        assert sorted(bytes(r.body) for r in rows) == sorted(f"s-{i}".encode()
                                                              for i in range(10))
        with pytest.raises(Exception, match="requires TLS"):
            reader().load().collect()
    finally:
        srv.kill()
