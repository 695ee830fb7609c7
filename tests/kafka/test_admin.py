"""Kafka's admin APIs on FMQ's topic settings, through confluent-kafka's AdminClient: topic
configs (CreateTopics, DescribeConfigs, IncrementalAlterConfigs) are FMQ's three per-topic
settings as ``fmq topic describe`` shows them; CreatePartitions grows queues;
DescribeCluster names the broker; a record's CreateTime is kept."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from fmq.client import Producer as FMQProducer
from tests.server.harness import run_cli


def _described(srv, topic: str) -> dict:
    done = run_cli("topic", "describe", topic, "--server", srv.address, "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    return answer.get("topic", answer)


def _configs(admin: AdminClient, topic: str) -> dict:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(30)


def _alter(admin: AdminClient, topic: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource])[resource].result(30)


def _error_name(future) -> str:
    with pytest.raises(KafkaException) as caught:
        future.result(30)
    return caught.value.args[0].name()


def test_topic_configs_round_trip_through_fmq_topic_describe(shared_kafka_server):
    srv = shared_kafka_server
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    admin.create_topics([NewTopic("configured", num_partitions=2, config={
        "retention.ms": "3600000", "max.message.bytes": "65536"})])["configured"].result(30)
    described = _described(srv, "configured")
    assert (described["retention_ms"], described["max_message_size"],
            described["retention_bytes"]) == (3600000, 65536, None)

    configs = _configs(admin, "configured")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG: the topic's own
    assert not configs["retention.ms"].is_read_only
    assert configs["retention.bytes"].value == "-1"  # none of its own, none per queue
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].is_read_only

    _alter(admin, "configured",
           ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
           ConfigEntry("retention.bytes", "1048576",
                       incremental_operation=AlterConfigOpType.SET),
           ConfigEntry("max.message.bytes", None,
                       incremental_operation=AlterConfigOpType.DELETE))
    described = _described(srv, "configured")
    assert (described["retention_ms"], described["retention_bytes"],
            described["max_message_size"]) == (60000, 1048576, None)
    configs = _configs(admin, "configured")
    assert configs["retention.ms"].value == "60000"
    assert configs["max.message.bytes"].value == str(
        described["effective"]["max_message_size"])  # the broker's again
    assert configs["max.message.bytes"].source == 4  # STATIC_BROKER_CONFIG


def test_configs_fmq_does_not_keep_are_refused_and_change_nothing(shared_kafka_server):
    srv = shared_kafka_server
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    refused = admin.create_topics([NewTopic("compacted", num_partitions=1, config={
        "cleanup.policy": "compact"})])["compacted"]
    assert _error_name(refused) == "INVALID_CONFIG"
    assert "compacted" not in admin.list_topics(timeout=10).topics

    admin.create_topics([NewTopic("kept", num_partitions=1, config={
        "retention.ms": "120000"})])["kept"].result(30)
    for entry in (ConfigEntry("segment.ms", "100", incremental_operation=AlterConfigOpType.SET),
                  ConfigEntry("retention.ms", "soon",
                              incremental_operation=AlterConfigOpType.SET),
                  ConfigEntry("retention.ms", "-1", incremental_operation=AlterConfigOpType.SET)):
        resource = ConfigResource(ResourceType.TOPIC, "kept", incremental_configs=[
            ConfigEntry("retention.bytes", "4096",
                        incremental_operation=AlterConfigOpType.SET), entry])
        assert _error_name(admin.incremental_alter_configs([resource])[resource]) == \
            "INVALID_CONFIG"
    described = _described(srv, "kept")
    assert (described["retention_ms"], described["retention_bytes"]) == (120000, None)
    missing = ConfigResource(ResourceType.TOPIC, "no-such-topic")
    assert _error_name(admin.describe_configs([missing])[missing]) == \
        "UNKNOWN_TOPIC_OR_PART"


def test_create_partitions_grows_the_topic_s_queues(shared_kafka_server):
    srv = shared_kafka_server
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    admin.create_topics([NewTopic("growing", num_partitions=2)])["growing"].result(30)
    admin.create_partitions([NewPartitions("growing", 5)])["growing"].result(30)
    assert _described(srv, "growing")["queues"] == 5
    assert _error_name(admin.create_partitions([NewPartitions("growing", 3)])["growing"]) == \
        "INVALID_PARTITIONS"
    assert _described(srv, "growing")["queues"] == 5

    producer = Producer({"bootstrap.servers": srv.bootstrap, "acks": "all",
                         "topic.metadata.refresh.interval.ms": 500})
    delivered = []
    producer.produce("growing", b"in the new partition", partition=4,
                     on_delivery=lambda err, msg: delivered.append((err, msg.partition())))
    assert producer.flush(30) == 0
    assert delivered == [(None, 4)]
    consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("growing", 4, 0)])
    try:
        got = _poll_one(consumer)
    finally:
        consumer.close()
    assert (got.partition(), got.offset(), got.value()) == (4, 0, b"in the new partition")


def test_describe_cluster_names_this_broker(shared_kafka_server):
    srv = shared_kafka_server
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    cluster = admin.describe_cluster().result(30)
    assert cluster.cluster_id == "fmq"
    assert [(n.host, n.port) for n in cluster.nodes] == [("127.0.0.1", srv.kafka_port)]
    assert cluster.controller.id == cluster.nodes[0].id


def _poll_one(consumer: Consumer):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            return msg
    raise AssertionError("no message within 30 s")


def test_a_record_keeps_its_producer_s_create_time(shared_kafka_server):
    srv = shared_kafka_server
    producer = Producer({"bootstrap.servers": srv.bootstrap, "acks": "all"})
    created = 1_600_000_000_123  # 2020: far from any store time
    producer.produce("timed", b"old news", partition=0, timestamp=created)
    assert producer.flush(30) == 0  # alone: a partition's batch is stored all or none
    errors = []
    producer.produce("timed", b"bad", partition=0, headers=[("kafka.create_time", b"1")],
                     on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD
    with FMQProducer(srv.address) as fmq_producer:
        before = int(time.time() * 1000)
        fmq_producer.send("timed", b"from fmq", queue_id=0)
        after = int(time.time() * 1000)
    consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("timed", 0, 0)])
    try:
        first, second = _poll_one(consumer), _poll_one(consumer)
    finally:
        consumer.close()
    assert (first.value(), first.timestamp()) == (b"old news", (TIMESTAMP_CREATE_TIME, created))
    assert first.headers() is None  # the kept time is no header
    kind, stored = second.timestamp()
    assert second.value() == b"from fmq" and kind == TIMESTAMP_CREATE_TIME
    assert before - 1000 <= stored <= after + 1000  # an FMQ send: FMQ's store time
