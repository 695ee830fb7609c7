"""A Kafka consumer group reading through a fail-over, with librdkafka's own checks on:
three nodes electing through etcd (``sync`` mode), an idempotent producer (acks=all) and a
confluent-kafka consumer of a group (``subscribe``, each message committed once read)
while the primary is SIGKILLed. librdkafka validates its position with
OffsetForLeaderEpoch after the leader changes (KIP-320) and its group moves to the new
coordinator; ``auto.offset.reset=error`` turns any reset of its position into an error
event the test sees. Each partition must be read as offsets 0, 1, 2, ... with nothing
lost, and a message read twice only when it came after the partition's last successful
commit (the group resumes from there)."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from fmq.server.kafka.brokers import node_id

from .test_replication import KafkaFailoverGroup, _wait_for, _wait_leader

TOPIC = "positions"
PARTITIONS = 2
BEFORE, AFTER = 150, 150


class GroupReader:
    """A consumer of group ``positions`` in a thread of its own: every message read, every
    commit that succeeded, every error event."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "positions",
            "enable.auto.commit": False, "auto.offset.reset": "error",
            "topic.metadata.refresh.interval.ms": 1000, "session.timeout.ms": 10_000})
        self.read: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        #: Each read's partition's committed offset when it was read.
        self.committed_then: list[int] = []
        self.committed: dict[int, int] = {}  # partition: the next offset, committed
        self.errors: list[str] = []
        self.commit_failures = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def start(self) -> GroupReader:
        self.consumer.subscribe([TOPIC])
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    self.errors.append(str(msg.error()))
                continue
            self.read.append((msg.partition(), msg.offset(), msg.value()))
            self.committed_then.append(self.committed.get(msg.partition(), 0))
            try:
                self.consumer.commit(message=msg, asynchronous=False)
                self.committed[msg.partition()] = msg.offset() + 1
            except KafkaException:
                self.commit_failures += 1  # during the fail-over; a later commit covers it

    def offsets(self, partition: int) -> list[int]:
        return [o for p, o, _ in self.read if p == partition]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.consumer.close()


def test_a_group_consumer_reads_on_through_a_failover_without_reset_loss_or_repeat(
        tmp_path):
    group = KafkaFailoverGroup(str(tmp_path)).start()
    reader = None
    try:
        primary = group.wait_whole()
        creator = AdminClient({"bootstrap.servers": f"127.0.0.1:{primary.kafka_port}"})
        creator.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS)])[TOPIC].result(30)
        _wait_leader(group.bootstrap, node_id("g", primary.name))
        producer = Producer({"bootstrap.servers": group.bootstrap, "acks": "all",
                             "enable.idempotence": True, "message.timeout.ms": 120_000,
                             "topic.metadata.refresh.interval.ms": 1000})
        acked: list[bytes] = []

        def delivered(err, msg) -> None:
            assert err is None, err
            acked.append(msg.value())

        def produce(first: int, count: int) -> None:
            for i in range(first, first + count):
                producer.produce(TOPIC, b"m-%d" % i, partition=i % PARTITIONS,
                                 on_delivery=delivered)
                producer.poll(0)
            assert producer.flush(120) == 0

        produce(0, BEFORE)
        # The group starts at offset 0 from a commit: with auto.offset.reset=error a
        # partition never committed would be a reset too.
        starter = Consumer({"bootstrap.servers": group.bootstrap, "group.id": "positions"})
        starter.commit(offsets=[TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)],
                       asynchronous=False)
        starter.close()
        reader = GroupReader(group.bootstrap).start()
        _wait_for(lambda: len(reader.read) >= BEFORE or reader.errors, 60,
                  "the first messages read")
        assert not reader.errors, reader.errors

        primary.kill()  # SIGKILL
        survivor = group.wait_primary(among=group.others(primary), timeout=60)
        _wait_leader(f"127.0.0.1:{survivor.kafka_port}", node_id("g", survivor.name))
        produce(BEFORE, AFTER)
        assert len(acked) == BEFORE + AFTER
        _wait_for(lambda: len({v for _, _, v in reader.read}) >= BEFORE + AFTER, 90,
                  "every message read from the new primary")
        time.sleep(1)  # anything read twice arrives now
        reader.close()

        assert not reader.errors, reader.errors  # no reset, no error event
        assert {v for _, _, v in reader.read} == set(acked)
        for p in range(PARTITIONS):
            offsets = reader.offsets(p)
            want = (BEFORE + AFTER) // PARTITIONS
            assert sorted(set(offsets)) == list(range(want)), f"partition {p} lost offsets"
        seen: set[tuple[int, int]] = set()
        for (p, o, _), committed in zip(reader.read, reader.committed_then, strict=True):
            # Read again only when the group went back to its last commit, at or before it.
            assert (p, o) not in seen or o >= committed, (
                f"partition {p} offset {o} read again though {committed} was committed")
            seen.add((p, o))
        print(f"read {len(reader.read)} ({len(reader.read) - len(seen)} again), "
              f"{reader.commit_failures} commits failed")
    except AssertionError:
        print(group.logs())
        raise
    finally:
        if reader is not None and not reader.stop.is_set():
            reader.close()
        group.kill()
