"""The two front doors share one broker: a message sent with FMQ's Producer is read by a
Kafka consumer, and a Kafka-produced message by FMQ's Consumer, with key, body and
properties/headers the same on both sides; an acks=all acknowledgement survives kill -9."""

from __future__ import annotations

import time

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition

from fmq.client import Consumer, Producer

from .test_clients import consume, produce_all


def test_an_fmq_message_reaches_a_kafka_consumer(shared_kafka_server):
    srv = shared_kafka_server
    with Producer(srv.address) as producer:
        sent = producer.send("fmq-to-kafka", b"\x00body\xff", key="order-7",
                             properties={"origin": "fmq", "lang": "çé"}, queue_id=1)
    [msg] = consume(srv.bootstrap, "fmq-to-kafka", 1, partition=1)
    assert msg.offset() == sent.queue_offset
    assert (msg.key(), msg.value()) == (b"order-7", b"\x00body\xff")
    assert sorted(msg.headers()) == [("lang", "çé".encode()), ("origin", b"fmq")]


def test_a_kafka_message_reaches_an_fmq_consumer(shared_kafka_server):
    srv = shared_kafka_server
    produce_all(srv.bootstrap, "kafka-to-fmq", [
        (b"order-8", b"paid", [("origin", b"kafka"), ("blob", b"\xff\x00")]),
        (None, None, [])], partition=2)
    got = []
    with Consumer(srv.address, "interop", ["kafka-to-fmq"], start="earliest") as consumer:
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            got += consumer.poll(timeout=0.5)
    assert [(m.queue_id, m.queue_offset, m.key, m.body) for m in got] == [
        (2, 0, "order-8", b"paid"), (2, 1, None, b"")]
    # Text headers are plain properties; a binary one is escaped (docs/kafka.md).
    assert got[0].properties["origin"] == "kafka"
    assert got[0].properties["blob"].startswith("\x00")
    assert got[1].properties["kafka.null_value"] == "1"
    assert set(got[1].properties) == {"kafka.null_value", "kafka.create_time"}


def test_acks_all_messages_survive_kill_9(kafka_server):
    srv = kafka_server()
    records = [(b"k%d" % i, b"v%d" % i, [("n", b"%d" % i)]) for i in range(200)]
    offsets = produce_all(srv.bootstrap, "durable", records, partition=0)
    assert offsets == list(range(200))
    srv.kill()
    srv.start()
    got = consume(srv.bootstrap, "durable", 200)
    assert [(m.key(), m.value(), m.headers()) for m in got] == records


def test_offsets_are_listed_earliest_latest_and_by_time(shared_kafka_server):
    srv = shared_kafka_server
    produce_all(srv.bootstrap, "listed", [(None, b"a", [])] * 3, partition=0)
    time.sleep(0.05)
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    produce_all(srv.bootstrap, "listed", [(None, b"b", [])] * 2, partition=0)
    consumer = KafkaConsumer({"bootstrap.servers": srv.bootstrap, "group.id": "lo"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("listed", 0), 10) == (0, 5)
        [found] = consumer.offsets_for_times([TopicPartition("listed", 0, middle_ms)], 10)
        assert found.offset == 3
        [none] = consumer.offsets_for_times([TopicPartition("listed", 0,
                                                            int(time.time() * 1000) + 60_000)],
                                            10)
        assert none.offset == -1
    finally:
        consumer.close()
