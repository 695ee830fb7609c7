"""``format("fmq-topic")`` over a topic routed over two broker groups: a real etcd, two
broker groups of one node each as real ``fmq server`` processes, a real ``local[2]`` Spark
session. The source is given one node's address only and finds the other group's primary
through the topic's route (docs/spark.md, "A topic over several broker groups"); the sink
writes to a topic routed over both groups, given the same one address."""

from __future__ import annotations

import glob
import json
import os

import pytest
from pyspark.sql import functions as F

from fmq.client import Client, Producer
from fmq.coordination.lease import LeaderLease
from fmq.protocol import Op
from fmq.spark.errors import GroupUnreachable
from fmq.spark.sink_commit import TX_PREFIX
from fmq.spark.topic_source import TopicBatchReader, register
from tests.cluster.kit import known_everywhere, local_queues, two_groups
from tests.etcdkit import ETCD
from tests.server.harness import free_port, wait_until

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

QUEUES = 2  # per group


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with two_groups(tmp_path_factory.mktemp("spark-groups")) as (store, nodes, etcd):
        yield store, nodes, etcd


@pytest.fixture(scope="module")
def topics(spark):
    register(spark)
    return spark


def send(nodes, topic: str, prefix: str, count: int) -> dict[bytes, tuple[str, int, int]]:
    """``count`` unkeyed messages (spread over every group of the route): body ->
    (group, local queue id, queue offset) as the producer was told."""
    servers = ",".join(n.address for n in nodes.values())
    with Producer(servers, linger_ms=1) as p:
        bodies = [f"{prefix}-{i}".encode() for i in range(count)]
        results = [p.send(topic, b) for b in bodies]
    return {b: (r.group, r.queue_id, r.queue_offset) for b, r in zip(bodies, results, strict=True)}


def test_a_batch_read_returns_every_message_of_both_groups_once(topics, cluster):
    store, nodes, _etcd = cluster
    route = store.create("sg-batch", QUEUES, ["g1", "g2"])
    known_everywhere(nodes, "sg-batch", route.version)
    sent = send(nodes, "sg-batch", "b", 40)
    assert {g for g, _q, _o in sent.values()} == {"g1", "g2"}
    df = (topics.read.format("fmq-topic").option("servers", nodes["g1"].address)
          .option("subscribe", "sg-batch").load())
    rows = df.select("group", "queue_id", "queue_offset", "body").collect()
    got = [(bytes(r.body), (r.group, r.queue_id, r.queue_offset)) for r in rows]
    assert len(got) == len(sent)  # no message twice
    assert dict(got) == sent      # every message, with its group, queue and offset
    assert df.rdd.getNumPartitions() == len({(g, q) for g, q, _o in sent.values()})


def routed(store, nodes, topic: str) -> None:
    """``topic`` routed over g1 and g2, QUEUES queues each, made on each primary."""
    route = store.create(topic, QUEUES, ["g1", "g2"])
    known_everywhere(nodes, topic, route.version)
    for node in nodes.values():
        wait_until(lambda n=node: local_queues(n, topic) == QUEUES, 30,
                   f"{topic}'s queues made on {node.address}")


def read_topic(spark, nodes, topic: str) -> list[tuple[bytes, str]]:
    """Every message of ``topic`` in both groups, as (body, group), read through one
    node's address."""
    rows = (spark.read.format("fmq-topic").option("servers", nodes["g1"].address)
            .option("subscribe", topic).load().select("body", "group").collect())
    return [(bytes(r.body), r.group) for r in rows]


def open_sink_transactions(nodes) -> list[str]:
    out = []
    for node in nodes.values():
        with Client(node.address) as c:
            out += [t["tx_id"] for t in c.call(Op.LIST_TX, {})["transactions"]
                    if t["tx_id"].startswith(TX_PREFIX)]
    return out


@pytest.mark.timeout(600)  # a batch write and a streaming query over two groups
def test_a_routed_topic_is_read_and_written_back_once_each(topics, cluster, tmp_path):
    """A topic over both groups read (batch, then as a stream), upper-cased and written
    to topics over both groups, the sink given g1's address alone: each task's
    transaction lives in the group of its first row, the driver commits them in both."""
    store, nodes, _etcd = cluster
    for topic in ("sg-in", "sg-out", "sg-out-stream"):
        routed(store, nodes, topic)
    sent = send(nodes, "sg-in", "in", 60)
    assert {g for g, _q, _o in sent.values()} == {"g1", "g2"}
    wanted = sorted(b.upper() for b in sent)
    g1 = nodes["g1"].address

    def upper(df):
        # A key per message spreads the tasks' first rows, so their transactions, over
        # both groups.
        return df.select(F.format_string("%s-%d-%d", "group", "queue_id", "queue_offset")
                         .alias("key"), F.upper(F.col("body").cast("string")).alias("body"))

    source = (topics.read.format("fmq-topic").option("servers", g1)
              .option("subscribe", "sg-in").load())
    (upper(source).write.format("fmq-topic").option("servers", g1)
     .option("topic", "sg-out").mode("append").save())
    written = read_topic(topics, nodes, "sg-out")
    assert sorted(b for b, _g in written) == wanted
    assert {g for _b, g in written} == {"g1", "g2"}

    query = (upper(topics.readStream.format("fmq-topic").option("servers", g1)
                   .option("subscribe", "sg-in").option("startingOffsets", "earliest")
                   .load())
             .writeStream.format("fmq-topic").option("servers", g1)
             .option("topic", "sg-out-stream")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180), "the availableNow query did not finish"
    assert query.exception() is None, query.exception()
    streamed = read_topic(topics, nodes, "sg-out-stream")
    assert sorted(b for b, _g in streamed) == wanted
    assert {g for _b, g in streamed} == {"g1", "g2"}
    assert open_sink_transactions(nodes) == []


def _last_offsets(checkpoint: str) -> dict:
    # Spark's offset log: one file per micro-batch, the source's offsets on its last line.
    newest = max(glob.glob(os.path.join(checkpoint, "offsets", "[0-9]*")),
                 key=lambda p: int(os.path.basename(p)))
    with open(newest) as f:
        return json.loads(f.read().splitlines()[-1])


def test_a_stream_reads_each_message_once_across_groups_and_an_expansion(
        topics, cluster, tmp_path):
    """Micro-batch 1 reads the topic in g1 alone; the route then grows onto g2 and
    messages arrive in both groups; micro-batch 2 goes on in g1 from its checkpointed
    offsets and reads g2's new queues from 0."""
    store, nodes, _etcd = cluster
    checkpoint, sink = str(tmp_path / "checkpoint"), str(tmp_path / "sink")

    def run_available_now() -> None:
        query = (topics.readStream.format("fmq-topic")
                 .option("servers", nodes["g1"].address).option("subscribe", "sg-stream")
                 .option("startingOffsets", "earliest").load()
                 .select("group", "queue_id", "queue_offset", "body")
                 .writeStream.format("parquet").option("path", sink)
                 .option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(120), "the availableNow query did not finish"
        assert query.exception() is None, query.exception()

    route = store.create("sg-stream", QUEUES, ["g1"])
    known_everywhere(nodes, "sg-stream", route.version)
    sent = send(nodes, "sg-stream", "first", 20)
    run_available_now()
    assert _last_offsets(checkpoint) == {"sg-stream": {
        f"g1/{q}": sum(1 for g, qq, _o in sent.values() if qq == q) for q in range(QUEUES)}}

    grown = store.expand("sg-stream", "g2", QUEUES)
    known_everywhere(nodes, "sg-stream", grown.version)
    later = send(nodes, "sg-stream", "second", 40)
    assert {g for g, _q, _o in later.values()} == {"g1", "g2"}
    sent |= later
    run_available_now()

    rows = topics.read.parquet(sink).collect()
    got = [(bytes(r.body), (r.group, r.queue_id, r.queue_offset)) for r in rows]
    assert len(got) == len(sent)  # nothing twice
    assert dict(got) == sent      # nothing lost
    per_queue: dict[str, int] = {}
    for g, q, _o in sent.values():
        per_queue[f"{g}/{q}"] = per_queue.get(f"{g}/{q}", 0) + 1
    assert _last_offsets(checkpoint) == {"sg-stream": per_queue}


def test_a_group_without_a_reachable_primary_fails_the_plan_naming_it(topics, cluster):
    """Its queues are never skipped: planning fails with a retriable error naming it."""
    store, nodes, etcd = cluster
    store.register_group("g3")
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    assert LeaderLease(etcd.url, "g3", "n1", dead, ttl_s=120).try_acquire() is not None
    route = store.create("sg-dead", QUEUES, ["g1", "g3"])
    known_everywhere(nodes, "sg-dead", route.version)
    wait_until(lambda: _primary_named(nodes["g1"].address, "sg-dead", "g3") == dead, 15,
               "g1 to name g3's primary")
    with pytest.raises(GroupUnreachable, match="broker group g3") as caught:
        TopicBatchReader({"servers": nodes["g1"].address, "subscribe": "sg-dead"})
    assert caught.value.retriable and caught.value.group == "g3"


def _primary_named(server: str, topic: str, group: str) -> str:
    from fmq.spark.topic_client import QueueClient
    from fmq.spark.topic_groups import read_route

    with QueueClient(server) as client:
        known = read_route(client, topic).broker_groups.get(group)
        return known.primary if known else ""
