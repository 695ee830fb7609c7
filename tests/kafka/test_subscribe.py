"""Kafka's subscribe(): consumers of one group share a topic's partitions through JoinGroup
and SyncGroup, and a consumer leaving hands its partitions to the others."""

from __future__ import annotations

import time

from confluent_kafka import Consumer

from .test_clients import produce_all


def subscriber(bootstrap: str, group: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500})
    consumer.subscribe(["shared-topic"])
    return consumer


def drain(consumers: list[Consumer], want: int, timeout: float = 60) -> list[list[bytes]]:
    got: list[list[bytes]] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout
    while sum(map(len, got)) < want and time.monotonic() < deadline:
        for i, consumer in enumerate(consumers):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got[i].append(msg.value())
    return got


def test_subscribers_share_the_partitions_and_take_over_when_one_leaves(shared_kafka_server):
    bootstrap = shared_kafka_server.bootstrap
    for partition in range(4):
        produce_all(bootstrap, "shared-topic",
                    [(None, b"p%d-%d" % (partition, i), []) for i in range(5)],
                    partition=partition)
    first, second = subscriber(bootstrap, "sub"), subscriber(bootstrap, "sub")
    try:
        got = drain([first, second], 20)
        assert sorted(got[0] + got[1]) == sorted(b"p%d-%d" % (p, i) for p in range(4)
                                                 for i in range(5))
        assert got[0] and got[1], "one consumer got every partition"
        assignment = {tp.partition for tp in first.assignment()} | {
            tp.partition for tp in second.assignment()}
        assert assignment == {0, 1, 2, 3}
    finally:
        second.close()  # LeaveGroup: its partitions go to the first
    try:
        for partition in range(4):
            produce_all(bootstrap, "shared-topic", [(None, b"late-%d" % partition, [])],
                        partition=partition)
        [late] = drain([first], 4)
        assert sorted(late) == [b"late-%d" % p for p in range(4)]
    finally:
        first.close()
    log = shared_kafka_server.log()
    assert "Traceback" not in log
    assert "kafka group 'sub': member" in log and "left" in log


def test_kafka_python_subscribes_too(shared_kafka_server):
    from kafka import KafkaConsumer

    bootstrap = shared_kafka_server.bootstrap
    produce_all(bootstrap, "kp-sub", [(None, b"one", [])], partition=0)
    consumer = KafkaConsumer("kp-sub", bootstrap_servers=bootstrap, group_id="kp-group",
                             auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    try:
        got = next(iter(consumer))
        assert got.value == b"one"
        consumer.commit()
    finally:
        consumer.close()
