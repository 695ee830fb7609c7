"""Committed offsets through Kafka's OffsetCommit / OffsetFetch are the FMQ group's: a Kafka
consumer resumes from its commit, and an FMQ consumer of the same group continues there."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_STORED, Consumer, TopicPartition

from fmq.client import Consumer as FMQConsumer

from .test_clients import produce_all


def kafka_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})


def poll_values(consumer: Consumer, count: int, timeout: float = 30) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    return got


def test_a_kafka_commit_is_the_fmq_groups_offset(shared_kafka_server):
    srv = shared_kafka_server
    produce_all(srv.bootstrap, "committed", [(None, b"m%d" % i, []) for i in range(5)])
    first = kafka_consumer(srv.bootstrap, "shared")
    first.assign([TopicPartition("committed", 0, 0)])
    try:
        assert poll_values(first, 2) == [b"m0", b"m1"]
        first.commit(offsets=[TopicPartition("committed", 0, 2)], asynchronous=False)
        [stored] = first.committed([TopicPartition("committed", 0)], timeout=10)
        assert stored.offset == 2
    finally:
        first.close()
    second = kafka_consumer(srv.bootstrap, "shared")
    second.assign([TopicPartition("committed", 0, OFFSET_STORED)])  # from the commit
    try:
        assert poll_values(second, 1) == [b"m2"]
        second.commit(offsets=[TopicPartition("committed", 0, 3)], asynchronous=False)
    finally:
        second.close()
    # FMQ's own consumer of the same group starts where the Kafka consumer committed.
    with FMQConsumer(srv.address, "shared", ["committed"], start="committed") as consumer:
        bodies: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(bodies) < 2 and time.monotonic() < deadline:
            bodies += [m.body for m in consumer.poll(timeout=0.5) if m.queue_id == 0]
    assert bodies == [b"m3", b"m4"]
