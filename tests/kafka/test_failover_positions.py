"""Kafka consumers reading through a fail-over, with librdkafka's own checks on: three nodes
electing through etcd (``sync`` mode), an idempotent producer (acks=all), and two
confluent-kafka consumers while the primary is SIGKILLed:

* one of a group (``subscribe``, each message committed once read): its group moves to the
  new primary (the coordinator) and resumes from its commits;
* one with ``assign()`` and no group: its position is what it fetched, so after the leader
  change librdkafka validates it with OffsetForLeaderEpoch (KIP-320) before fetching on.

``auto.offset.reset=error`` turns any reset of a position into an error event the test
sees. Each partition must be read as offsets 0, 1, 2, ... with nothing lost; the group's
consumer may read a message again only past its partition's last successful commit (the
group resumes from there), the assigned one never."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from fmq.server.kafka.brokers import node_id
from tests.server.harness import server_stats

from .test_replication import KafkaFailoverGroup, _wait_for, _wait_leader

TOPIC = "positions"
PARTITIONS = 2
BEFORE, AFTER = 150, 150


class Reader:
    """A consumer in a thread of its own, of group ``positions`` (each message committed
    once read) or, with ``group=False``, assigned every partition from offset 0: every
    message read, every commit that succeeded, every error event."""

    def __init__(self, bootstrap: str, group: bool) -> None:
        self.group = group
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": "positions" if group else "positions-assigned",
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

    def start(self) -> Reader:
        if self.group:
            self.consumer.subscribe([TOPIC])
        else:
            self.consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
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
            if not self.group:
                continue
            try:
                self.consumer.commit(message=msg, asynchronous=False)
                self.committed[msg.partition()] = msg.offset() + 1
            except KafkaException:
                self.commit_failures += 1  # during the fail-over; a later commit covers it

    def values(self) -> set[bytes]:
        return {v for _, _, v in self.read}

    def check(self, acked: list[bytes]) -> int:
        """Assert no reset, nothing lost, no repeat but past a commit; the repeats."""
        assert not self.errors, self.errors  # no reset, no error event
        assert self.values() == set(acked)
        for p in range(PARTITIONS):
            offsets = sorted({o for q, o, _ in self.read if q == p})
            assert offsets == list(range(len(acked) // PARTITIONS)), f"partition {p} lost"
        seen: set[tuple[int, int]] = set()
        for (p, o, _), committed in zip(self.read, self.committed_then, strict=True):
            # Read again only when the group went back to its last commit, at or before it.
            assert (p, o) not in seen or (self.group and o >= committed), (
                f"partition {p} offset {o} read again ({committed} committed)")
            seen.add((p, o))
        return len(self.read) - len(seen)

    def close(self) -> None:
        if not self.stop.is_set():
            self.stop.set()
            self.thread.join(30)
            self.consumer.close()


def test_consumers_read_on_through_a_failover_without_reset_loss_or_repeat(tmp_path):
    group = KafkaFailoverGroup(str(tmp_path)).start()
    readers: list[Reader] = []
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
        readers = [Reader(group.bootstrap, group=True).start(),
                   Reader(group.bootstrap, group=False).start()]
        for reader in readers:
            _wait_for(lambda r=reader: len(r.read) >= BEFORE or r.errors, 60,
                      "the first messages read")
            assert not reader.errors, reader.errors

        primary.kill()  # SIGKILL
        survivor = group.wait_primary(among=group.others(primary), timeout=60)
        _wait_leader(f"127.0.0.1:{survivor.kafka_port}", node_id("g", survivor.name))
        produce(BEFORE, AFTER)
        assert len(acked) == BEFORE + AFTER
        for reader in readers:
            _wait_for(lambda r=reader: len(r.values()) >= BEFORE + AFTER or r.errors, 90,
                      "every message read from the new primary")
        time.sleep(1)  # anything read twice arrives now
        for reader in readers:
            reader.close()
        in_group, assigned = (r.check(acked) for r in readers)
        assert assigned == 0
        # The assigned consumer checked its position with the new leader (KIP-320).
        asked = server_stats(survivor.address)["kafka"]["requests_by_api"]
        assert asked.get("OffsetForLeaderEpoch", 0) >= 1, asked
        print(f"group: {in_group} read again, {readers[0].commit_failures} commits failed; "
              f"OffsetForLeaderEpoch asked {asked['OffsetForLeaderEpoch']} times")
    except AssertionError:
        print(group.logs())
        raise
    finally:
        for reader in readers:
            reader.close()
        group.kill()
