"""A topic without a route in a cluster of broker groups (made by a Kafka client's
CreateTopics at one group's node) and a consumer group coordinated by another group's
primary: every node's Metadata names the holding group's primary as the topic's leader, and
the coordinator finds the broker group holding the topic and keeps the commits there (docs/kafka.md, *Consumer groups over broker groups*). Before, every commit of such a
group was answered UNKNOWN_TOPIC_OR_PARTITION, and Metadata asked of another group's node
did not know the topic; a name held by two groups without a route is refused rather than
committed in one of them. Real librdkafka clients, real etcd, two real
one-node broker groups."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from fmq.server.kafka.brokers import node_id
from tests.server.harness import ServerProcess, json_lines, run_cli

from .test_cluster_topics import group_coordinated_by, one_node_groups, topic_over_two_groups

LOCAL = "g1-own"


def _create(node: ServerProcess, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.kafka_port}"})
    for future in admin.create_topics([NewTopic(topic, partitions)]).values():
        future.result(30)


def _consumer(node: ServerProcess, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": f"127.0.0.1:{node.kafka_port}", "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})


def _read(consumer: Consumer, count: int, timeout: float = 30) -> list[bytes]:
    """``count`` messages' values, polled within ``timeout`` seconds."""
    got: list[bytes] = []
    errors: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error():
            errors.append(str(msg.error()))
        elif msg is not None:
            got.append(msg.value())
    assert len(got) >= count, (f"{len(got)} of {count} messages in {timeout} s; errors "
                               f"{errors[-5:]}; positions "
                               f"{consumer.position(consumer.assignment())}")
    return got


def _committed_in(node: ServerProcess, group: str) -> dict[tuple[str, int], int]:
    """(topic, queue) -> committed offset of ``group`` as ``fmq groups`` shows it on
    ``node``."""
    shown = run_cli("groups", group, "--server", node.address, "--json")
    if shown.returncode != 0:
        return {}
    return {(r["topic"], r["queue_id"]): r["committed"] for g in json_lines(shown.stdout)
            for r in g["offsets"] if r["committed"] is not None}


def _leaders(node: ServerProcess, topic: str) -> dict[int, int]:
    """Partition -> leader of ``topic`` as ``node``'s Metadata answers it."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.kafka_port}"})
    found = admin.list_topics(topic, timeout=10).topics[topic]
    assert found.error is None, found.error
    return {i: p.leader for i, p in found.partitions.items()}


def test_commits_of_a_topic_without_a_route_reach_the_group_holding_it(tmp_path):
    with topic_over_two_groups(tmp_path) as nodes:
        _create(nodes["g1"], LOCAL, 2)
        # Every node names g1's primary as the leader (before: only g1's nodes knew it).
        g1 = node_id("g1", "g1-n1")
        assert _leaders(nodes["g2"], LOCAL) == _leaders(nodes["g1"], LOCAL) == {0: g1, 1: g1}
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{nodes['g1'].kafka_port}",
                             "acks": "all"})
        for i in range(10):
            producer.produce(LOCAL, b"m%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        group = group_coordinated_by(nodes, "g2", "unrouted")
        partitions = [TopicPartition(LOCAL, p) for p in (0, 1)]

        consumer = _consumer(nodes["g1"], group)
        try:
            consumer.assign(partitions)
            assert sorted(_read(consumer, 10)) == sorted(b"m%d" % i for i in range(10))
            committed = consumer.commit(asynchronous=False)  # raised before the fix
            assert {(tp.partition, tp.offset, tp.error) for tp in committed} == \
                {(0, 5, None), (1, 5, None)}
            # The commits are g1's (the queues' group), read back through g2's coordinator.
            assert _committed_in(nodes["g1"], group) == {(LOCAL, 0): 5, (LOCAL, 1): 5}
            assert _committed_in(nodes["g2"], group) == {}
            assert [tp.offset for tp in consumer.committed(partitions, timeout=30)] == [5, 5]
        finally:
            consumer.close()

        producer.produce(LOCAL, b"after", partition=1)
        assert producer.flush(30) == 0
        resumed = _consumer(nodes["g1"], group)
        try:
            resumed.subscribe([LOCAL])  # a member: it resumes from the commits
            assert _read(resumed, 1, 60) == [b"after"]
        finally:
            resumed.close()


def _commit_codes(consumer: Consumer, offsets: list[TopicPartition]) -> list[int]:
    """The Kafka code of each partition of a synchronous commit (0: stored)."""
    try:
        answered = consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        return [exc.args[0].code()] * len(offsets)
    return [0 if tp.error is None else tp.error.code() for tp in answered]


def test_a_name_two_other_groups_hold_without_a_route_is_refused_not_committed(tmp_path):
    with one_node_groups(tmp_path, {g: True for g in ("g1", "g2", "g3")}) as (_, nodes):
        for g in ("g1", "g3"):
            _create(nodes[g], LOCAL, 1)
        group = group_coordinated_by(nodes, "g2", "twice")
        consumer = _consumer(nodes["g1"], group)
        try:
            # Which one's partition 0 is it? Neither is stored.
            assert _commit_codes(consumer, [TopicPartition(LOCAL, 0, 3)]) == \
                [KafkaError.TOPIC_EXCEPTION]
            assert all(_committed_in(n, group) == {} for n in nodes.values())
            # Once g3's is deleted the name is g1's alone.
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{nodes['g3'].kafka_port}"})
            for future in admin.delete_topics([LOCAL]).values():
                future.result(30)
            assert _commit_codes(consumer, [TopicPartition(LOCAL, 0, 0)]) == [0]
        finally:
            consumer.close()
        assert _committed_in(nodes["g1"], group) == {(LOCAL, 0): 0}


def test_a_topic_no_group_holds_is_unknown(tmp_path):
    with topic_over_two_groups(tmp_path) as nodes:
        group = group_coordinated_by(nodes, "g2", "nowhere")
        consumer = _consumer(nodes["g1"], group)
        try:
            assert _commit_codes(consumer, [TopicPartition("nowhere", 0, 0)]) == \
                [KafkaError.UNKNOWN_TOPIC_OR_PART]
        finally:
            consumer.close()
