"""Kafka clients on a replication group electing through etcd: Metadata names every node,
with the group's primary as every partition's leader, and clients carry on through a
SIGKILL of the primary (NOT_LEADER_OR_FOLLOWER and LEADER_NOT_AVAILABLE send them to a
fresh Metadata) with nothing acknowledged lost (acks=all in ``sync`` mode)."""

from __future__ import annotations

import os
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from fmq.server.kafka.brokers import node_id
from tests.replication.failover_kit import QUEUES, FailoverGroup
from tests.server.harness import ServerProcess, free_port

TOPIC = "kafka-failover"


class KafkaFailoverGroup(FailoverGroup):
    """The fail-over kit's three-node group, each node with a Kafka port."""

    def start(self) -> KafkaFailoverGroup:
        self.etcd.start()
        self.kafka_ports: dict[str, int] = {}
        for name in self.names:
            port = free_port()
            node = ServerProcess(os.path.join(self.work, name), self.config, extra_args=(
                "--coordinator", self.etcd.url, "--group", self.group, "--node", name,
                "--kafka-port", str(port)))
            node.kafka_port, node.name = port, name
            self.nodes.append(node)
        for node in self.nodes:
            node.start()
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.kafka_port}" for n in self.nodes)


def _leaders(bootstrap: str) -> set[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
    return {p.leader for p in topic.partitions.values()}


def _wait_leader(bootstrap: str, want: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    seen: set[int] = set()
    while time.monotonic() < deadline:
        seen = _leaders(bootstrap)
        if seen == {want}:
            return
        time.sleep(0.2)
    raise AssertionError(f"Metadata of {bootstrap} names leaders {seen}, not {want}")


def test_kafka_clients_follow_the_new_primary_and_lose_nothing_acknowledged(tmp_path):
    group = KafkaFailoverGroup(str(tmp_path)).start()
    stop = threading.Event()
    acked: list[bytes] = []
    acked_after_kill: list[bytes] = []
    killed = threading.Event()
    consumed: set[bytes] = set()
    try:
        primary = group.wait_whole()
        # Made on the primary first: a follower's Metadata cannot create a topic, and a
        # producer asking only followers would wait for it (docs/kafka.md).
        creator = AdminClient({"bootstrap.servers": f"127.0.0.1:{primary.kafka_port}"})
        creator.create_topics([NewTopic(TOPIC, num_partitions=QUEUES)])[TOPIC].result(30)
        every = {node_id("g", n.name): n.kafka_port for n in group.nodes}
        for node in group.nodes:  # asked any node, Metadata names every node (once read)
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.kafka_port}"})
            _wait_for(lambda a=admin: {b.id: b.port for b in a.list_topics(
                timeout=10).brokers.values()} == every, 30, "every node in Metadata")
        producer = Producer({"bootstrap.servers": group.bootstrap, "acks": "all",
                             "linger.ms": 5, "message.timeout.ms": 120_000,
                             "topic.metadata.refresh.interval.ms": 1000})

        def delivered(err, msg) -> None:
            if err is None:
                acked.append(msg.value())
                if killed.is_set():
                    acked_after_kill.append(msg.value())

        def produce() -> None:
            i = 0
            while not stop.is_set() and i < 100_000:
                producer.produce(TOPIC, b"m-%d" % i, partition=i % QUEUES,
                                 on_delivery=delivered)
                producer.poll(0.005)
                i += 1
            producer.flush(120)

        producing = threading.Thread(target=produce)
        producing.start()
        _wait_for(lambda: len(acked) >= 50, 30, "acknowledgements before the kill")
        _wait_leader(group.bootstrap, node_id("g", primary.name))

        # earliest: a new primary may show its copy's last records only once a follower of
        # its term holds them (docs/replication.md), and a fetch past them is out of range.
        consumer = Consumer({"bootstrap.servers": group.bootstrap, "group.id": "unused",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "topic.metadata.refresh.interval.ms": 1000})
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(QUEUES)])

        def consume_until(done: threading.Event) -> None:
            while not done.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    consumed.add(msg.value())

        consumer_stop = threading.Event()
        consuming = threading.Thread(target=consume_until, args=(consumer_stop,))
        consuming.start()
        time.sleep(0.5)
        primary.kill()  # SIGKILL
        killed.set()
        survivor = group.wait_primary(among=group.others(primary), timeout=60)
        _wait_leader(f"127.0.0.1:{survivor.kafka_port}", node_id("g", survivor.name))
        _wait_for(lambda: len(acked_after_kill) >= 50, 60,
                  "acknowledgements from the new primary")
        stop.set()
        producing.join(150)
        assert not producing.is_alive()
        everything = set(acked)
        _wait_for(lambda: everything <= consumed, 60, "every acknowledged message consumed")
        consumer_stop.set()
        consuming.join(10)
        consumer.close()
        assert len(acked) == len(everything)  # one acknowledgement per message
        print(f"{len(acked)} acknowledged ({len(acked_after_kill)} by the new primary), "
              f"{len(consumed)} distinct consumed")
    except AssertionError:
        print(group.logs())
        raise
    finally:
        stop.set()
        group.kill()


def _wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
