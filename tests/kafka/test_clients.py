"""Real Kafka clients against ``fmq server --kafka-port``: kcat (librdkafka's command line),
confluent-kafka, kafka-python and aiokafka, each producing and consuming through the Kafka
door of a real server process."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

RECORDS = [  # key, value, headers: every kind of null and binary the mapping must keep
    (b"order-1", b"paid", [("bin", b"\x00\xff\x01"), ("text", "çé".encode()), ("null", None)]),
    (None, b"no key", []),
    (b"tombstone", None, []),
    (b"empty", b"", [("h", b"")]),
]


def produce_all(bootstrap: str, topic: str, records: list, partition: int = 0,
                **config) -> list[int]:
    """Produce ``records`` with acks=all; their offsets, in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         **{k.replace("_", "."): v for k, v in config.items()}})
    offsets, errors = [], []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers or None,
                         partition=partition, on_delivery=delivered)
    assert producer.flush(30) == 0, "messages still unacknowledged after 30 s"
    assert not errors, errors
    return offsets


def consume(bootstrap: str, topic: str, count: int, partition: int = 0, offset: int = 0,
            timeout: float = 30) -> list:
    """``count`` messages of one partition read with assign() (no group)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "assigned",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, offset)])
    got: list = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
    finally:
        consumer.close()
    assert len(got) == count, f"read {len(got)} of {count} messages within {timeout}s"
    return got


def as_tuples(messages: list) -> list:
    return [(m.key(), m.value(), m.headers() or []) for m in messages]


def test_kcat_lists_the_broker_and_hides_fmq_internal_topics(shared_kafka_server):
    srv = shared_kafka_server
    produce_all(srv.bootstrap, "kcat-listed", RECORDS[:1])
    out = subprocess.run(["kcat", "-b", srv.bootstrap, "-L", "-m", "10"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert f"broker 0 at {srv.bootstrap}" in out
    assert 'topic "kcat-listed" with 4 partitions' in out
    assert '"%' not in out  # FMQ's own topics stay out of a full listing


def test_kcat_produces_and_consumes(shared_kafka_server):
    bootstrap = shared_kafka_server.bootstrap
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", "kcat-rt", "-p", "1", "-K:",
                    "-H", "source=kcat"], input="k1:hello\nk2:world\n", text=True,
                   timeout=30, check=True)
    out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", "kcat-rt", "-p", "1", "-e",
                          "-f", "%o %k %s %h\n"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    assert out.splitlines() == ["0 k1 hello source=kcat", "1 k2 world source=kcat"]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_round_trip_with_every_compression(shared_kafka_server, codec):
    bootstrap = shared_kafka_server.bootstrap
    topic = f"ck-{codec}"
    records = [*RECORDS, (b"big", b"0123456789" * 2000, [])]
    offsets = produce_all(bootstrap, topic, records, compression_type=codec)
    assert offsets == list(range(len(records)))
    got = consume(bootstrap, topic, len(records))
    assert [m.offset() for m in got] == offsets
    assert as_tuples(got) == [(k, v, h) for k, v, h in records]


def test_a_consumer_long_polls_until_a_message_arrives(shared_kafka_server):
    bootstrap = shared_kafka_server.bootstrap
    produce_all(bootstrap, "long-poll", [(b"k", b"first", [])])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lp",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 5000})
    consumer.assign([TopicPartition("long-poll", 0, 1)])
    try:
        assert consumer.poll(1.0) is None  # nothing past offset 0 yet
        produce_all(bootstrap, "long-poll", [(b"k", b"second", [])])
        started = time.monotonic()
        msg = None
        while msg is None and time.monotonic() - started < 10:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.value() == b"second" and msg.offset() == 1
        # Woken by the write, not by fetch.wait.max.ms running out.
        assert time.monotonic() - started < 4.5
    finally:
        consumer.close()


def test_kafka_python_round_trip(shared_kafka_server):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    bootstrap = shared_kafka_server.bootstrap
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
    sent = [producer.send("kp", key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"\x01")],
                          partition=2).get(30) for i in range(3)]
    producer.close()
    assert [(m.partition, m.offset) for m in sent] == [(2, 0), (2, 1), (2, 2)]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    tp = KTopicPartition("kp", 2)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = [(m.offset, m.key, m.value, list(m.headers)) for m in consumer]
    consumer.close()
    assert got == [(i, b"k%d" % i, b"v%d" % i, [("h", b"\x01")]) for i in range(3)]


def test_aiokafka_round_trip(shared_kafka_server):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    bootstrap = shared_kafka_server.bootstrap

    async def round_trip() -> list:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                    enable_idempotence=False)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait("aio", b"v%d" % i, key=b"k", partition=3,
                                             headers=[("h", b"\xfe")])
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False)
        await consumer.start()
        tp = ATopicPartition("aio", 3)
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list = []
            deadline = time.monotonic() + 20
            while len(got) < 3 and time.monotonic() < deadline:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                got += batch.get(tp, [])
            return [(m.offset, m.key, m.value, list(m.headers)) for m in got]
        finally:
            await consumer.stop()

    assert asyncio.run(round_trip()) == [(i, b"k", b"v%d" % i, [("h", b"\xfe")])
                                         for i in range(3)]
