"""A topic routed over two broker groups is one Kafka topic: Metadata lists the route's
global indices as partitions, each led by its group's primary, and Kafka clients given one
group's address produce to and consume from every partition. A consumer group's commits go
to its one coordinator, which stores each partition's in the broker group hosting it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from fmq.coordination.routes import ClusterRoutes
from fmq.protocol import Op
from fmq.server.kafka.brokers import node_id
from tests.cluster.kit import CLUSTER, CONFIG, call, known_everywhere, local_queues, queue_range
from tests.cluster.kit import wait_primary as wait_leading
from tests.etcdkit import EtcdProcess
from tests.server.harness import ServerProcess, free_port, wait_until

from .wire import exchange, request_type

TOPIC = "spread"
PER_GROUP = 2


def _start(tmp_path, etcd: EtcdProcess, group: str, door: bool) -> ServerProcess:
    """The one node of broker group ``group`` (with the Kafka door open or not), started."""
    port = free_port() if door else 0
    node = ServerProcess(str(tmp_path / group), CONFIG, extra_args=(
        "--coordinator", etcd.url, "--cluster-name", CLUSTER, "--group", group,
        "--node", f"{group}-n1", *(("--kafka-port", str(port)) if door else ())))
    node.kafka_port = port
    return node.start()


@contextmanager
def one_node_groups(tmp_path, doors: dict[str, bool]
                    ) -> Iterator[tuple[str, dict[str, ServerProcess]]]:
    """A real etcd's URL and one cluster of one-node broker groups, one per name of
    ``doors`` (each with the Kafka door open or not), each node leading its group and
    every group registered; killed at exit."""
    etcd = EtcdProcess(str(tmp_path / "etcd")).start()
    nodes: dict[str, ServerProcess] = {}
    try:
        for group, door in doors.items():
            nodes[group] = _start(tmp_path, etcd, group, door)
        for node in nodes.values():
            wait_leading(node)
        store = ClusterRoutes(etcd.url, CLUSTER)
        wait_until(lambda: set(store.groups()) == set(doors), 30, "the groups registered")
        yield etcd.url, nodes
    finally:
        for node in nodes.values():
            node.kill()
        etcd.stop()


def _leaders(bootstrap: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
    return {i: p.leader for i, p in topic.partitions.items()}


def both_leaders_known(bootstrap: str) -> bool:
    """Whether Metadata asked of ``bootstrap`` names a leader for every partition, two
    different ones (each group's primary); -1 is no leader known yet."""
    leaders = set(_leaders(bootstrap).values())
    return len(leaders) == 2 and -1 not in leaders


@contextmanager
def topic_over_two_groups(tmp_path) -> Iterator[dict[str, ServerProcess]]:
    """Two broker groups of one node each, ``g1`` and ``g2``, with the Kafka door open, and
    TOPIC routed over both (PER_GROUP queues each, made on each primary); killed at exit."""
    with one_node_groups(tmp_path, {"g1": True, "g2": True}) as (etcd_url, nodes):
        route = ClusterRoutes(etcd_url, CLUSTER).create(TOPIC, PER_GROUP, ["g1", "g2"])
        known_everywhere(nodes, TOPIC, route.version)
        for node in nodes.values():
            wait_until(lambda n=node: local_queues(n, TOPIC) == PER_GROUP, 30,
                       "the route's queues made on each primary")
        yield nodes


def test_a_topic_over_two_groups_is_one_kafka_topic(tmp_path):
    with topic_over_two_groups(tmp_path) as nodes:
        g1_bootstrap = f"127.0.0.1:{nodes['g1'].kafka_port}"
        want = {0: node_id("g1", "g1-n1"), 1: node_id("g1", "g1-n1"),
                2: node_id("g2", "g2-n1"), 3: node_id("g2", "g2-n1")}
        wait_until(lambda: _leaders(g1_bootstrap) == want, 30,
                   "Metadata to name each group's primary for its partitions")
        admin = AdminClient({"bootstrap.servers": g1_bootstrap})
        both = {want[0]: nodes["g1"].kafka_port, want[2]: nodes["g2"].kafka_port}
        wait_until(lambda: {b.id: b.port for b in admin.list_topics(
            timeout=10).brokers.values()} == both, 30, "both groups' brokers in Metadata")

        producer = Producer({"bootstrap.servers": g1_bootstrap, "acks": "all"})
        failures = []
        sent = {p: [b"p%d-m%d" % (p, i) for i in range(5)] for p in range(4)}
        for p, values in sent.items():
            for value in values:
                producer.produce(TOPIC, value, partition=p, on_delivery=lambda err, msg:
                                 err is not None and failures.append(err))
        assert producer.flush(60) == 0
        assert failures == []
        # Partitions 2 and 3 are g2's queues 0 and 1.
        for group, queue in (("g1", 0), ("g1", 1), ("g2", 0), ("g2", 1)):
            assert queue_range(nodes[group], TOPIC, queue) == (0, 5)

        consumer = Consumer({"bootstrap.servers": g1_bootstrap, "group.id": "unused",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(4)])
        got: dict[int, list[bytes]] = {p: [] for p in range(4)}
        deadline = time.monotonic() + 60
        try:
            while sum(map(len, got.values())) < 20 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got[msg.partition()].append(msg.value())
        finally:
            consumer.close()
        assert got == sent


def _commit(node: ServerProcess, group: str, offsets: dict[int, int]) -> dict[int, int]:
    """OffsetCommit (v8, outside any group) of ``offsets`` by partition; each one's code."""
    cls = request_type(8, 8)
    module = __import__(cls.__module__, fromlist=["x"])
    parts = tuple(module.OffsetCommitRequestPartition(
        partition_index=p, committed_offset=o, committed_leader_epoch=-1,
        committed_metadata="") for p, o in offsets.items())
    _, answer = exchange(("127.0.0.1", node.kafka_port), cls(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(module.OffsetCommitRequestTopic(name=TOPIC, partitions=parts),)))
    return {p.partition_index: p.error_code for t in answer.topics for p in t.partitions}


def _fetch(node: ServerProcess, group: str, partitions: list[int] | None
           ) -> tuple[int, dict[int, tuple[int, int]]]:
    """OffsetFetch (v7) of ``partitions`` (None: all): the top-level code, and (code,
    offset) by partition."""
    cls = request_type(9, 7)
    module = __import__(cls.__module__, fromlist=["x"])
    topics = (None if partitions is None else
              (module.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=tuple(partitions)),))
    _, answer = exchange(("127.0.0.1", node.kafka_port), cls(
        group_id=group, topics=topics, require_stable=False))
    return answer.error_code, {p.partition_index: (p.error_code, p.committed_offset)
                               for t in answer.topics if t.name == TOPIC for p in t.partitions}


def find_coordinator(node: ServerProcess, group: str) -> int:
    """The node id FindCoordinator (v3) asked of ``node`` names for ``group`` (-1: none
    now)."""
    cls = request_type(10, 3)
    _, answer = exchange(("127.0.0.1", node.kafka_port), cls(key=group, key_type=0))
    return answer.node_id if answer.error_code == ErrorCode.none else -1


def _coordinators(nodes: dict[str, ServerProcess], group: str) -> set[int]:
    return {find_coordinator(n, group) for n in nodes.values()}


def group_coordinated_by(nodes: dict[str, ServerProcess], broker_group: str,
                         prefix: str = "billing") -> str:
    """A consumer group id whose coordinator, as every node answers it, is the primary of
    ``broker_group`` (each node's id is its group's ``-n1`` node)."""
    want = node_id(broker_group, f"{broker_group}-n1")
    wait_until(lambda: -1 not in _coordinators(nodes, prefix), 30,
               "every node to name a coordinator")
    for i in range(200):
        group = f"{prefix}-{i}"
        answers = _coordinators(nodes, group)
        assert len(answers) == 1, f"the nodes name different coordinators for {group}: {answers}"
        if answers == {want}:
            return group
    raise AssertionError(f"no group id of 200 is coordinated by {broker_group}")


def _describe(node: ServerProcess, group: str) -> tuple[int, str]:
    """DescribeGroups (v5) of ``group``: its code and state."""
    _, answer = exchange(("127.0.0.1", node.kafka_port), request_type(15, 5)(
        groups=(group,), include_authorized_operations=False))
    (described,) = answer.groups
    return described.error_code, described.group_state


def _fmq_committed(node: ServerProcess, group: str) -> dict[int, int]:
    """The group's committed offsets in ``node``'s own queues, as FMQ's GROUPS says."""
    answer = json.loads(call(node, Op.GROUPS, {"group": group})["json"])
    return {r["queue_id"]: r["committed"] for g in answer["groups"] for r in g["offsets"]
            if r["topic"] == TOPIC and r["committed"] is not None}


def test_a_kafka_groups_commits_are_stored_by_the_broker_group_of_each_partition(tmp_path):
    with topic_over_two_groups(tmp_path) as nodes:
        g1, g2 = nodes["g1"], nodes["g2"]
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{g1.kafka_port}", "acks": "all"})
        for p in range(4):
            for i in range(5):
                producer.produce(TOPIC, b"m%d" % i, partition=p)
        assert producer.flush(60) == 0
        for group, queue in (("g1", 0), ("g1", 1), ("g2", 0), ("g2", 1)):
            wait_until(lambda n=nodes[group], q=queue: queue_range(n, TOPIC, q) == (0, 5), 30,
                       "every partition's records stored")

        # One coordinator per consumer group, the same whichever node is asked: here g2's
        # primary. It stores partitions 2 and 3 (its queues 0 and 1) itself and forwards
        # partition 0 to g1's primary, where queue 0 keeps it.
        billing = group_coordinated_by(nodes, "g2")
        assert _commit(g2, billing, {0: 1, 2: 3, 3: 4}) == {0: ErrorCode.none, 2: ErrorCode.none,
                                                           3: ErrorCode.none}
        assert _fmq_committed(g1, billing) == {0: 1}
        assert _fmq_committed(g2, billing) == {0: 3, 1: 4}
        # Another node is not its coordinator: nothing is stored there, the client looks
        # for the coordinator again.
        assert _commit(g1, billing, {0: 2, 2: 2}) == {0: ErrorCode.not_coordinator,
                                                      2: ErrorCode.not_coordinator}
        assert _fmq_committed(g1, billing) == {0: 1}
        assert _fetch(g1, billing, [0])[0] == ErrorCode.not_coordinator
        # A partition no broker group hosts, and an offset past a partition's end.
        assert _commit(g2, billing, {9: 1, 1: 6}) == {9: ErrorCode.unknown_topic_or_partition,
                                                      1: ErrorCode.offset_out_of_range}

        # Fetched back by Kafka partition, each from the group hosting it.
        assert _fetch(g2, billing, [0, 1, 2, 3]) == (ErrorCode.none, {
            0: (ErrorCode.none, 1), 1: (ErrorCode.none, -1), 2: (ErrorCode.none, 3),
            3: (ErrorCode.none, 4)})
        assert _fetch(g2, billing, None) == (ErrorCode.none, {
            0: (ErrorCode.none, 1), 2: (ErrorCode.none, 3), 3: (ErrorCode.none, 4)})

        # A group coordinated by g1 works the same the other way round.
        audit = group_coordinated_by(nodes, "g1", "audit")
        assert _commit(g1, audit, {1: 5, 3: 2}) == {1: ErrorCode.none, 3: ErrorCode.none}
        assert _fmq_committed(g1, audit) == {1: 5}
        assert _fmq_committed(g2, audit) == {1: 2}
        assert _fetch(g1, audit, None) == (ErrorCode.none, {1: (ErrorCode.none, 5),
                                                           3: (ErrorCode.none, 2)})

        # A group whose only commits are in another broker group is Empty, not Dead, at
        # its coordinator; another node is not its coordinator.
        ops = group_coordinated_by(nodes, "g1", "ops")
        assert _describe(g1, ops) == (ErrorCode.none, "Dead")
        assert _commit(g1, ops, {3: 1}) == {3: ErrorCode.none}
        assert _fmq_committed(g1, ops) == {}
        assert _describe(g1, ops) == (ErrorCode.none, "Empty")
        assert _describe(g2, ops)[0] == ErrorCode.not_coordinator
