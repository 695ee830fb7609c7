"""One protocol per consumer group across broker groups (docs/kafka.md, *Consumer groups over
broker groups*), with real clients (librdkafka, FMQ's routing consumer), real etcd and two
real one-node broker groups: a Kafka group's members live at its coordinator's broker group,
FMQ's consumers in every broker group hosting their topics, and each side is refused while
the other has live members of the group in another broker group; once they left, the group
takes the other protocol again. Joins of one protocol spread over both groups still work,
and a broker group that cannot be asked makes the join retriable, never taken."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, KafkaError
from kio.schema.errors import ErrorCode

from fmq.client import Consumer as FMQConsumer
from fmq.coordination.routes import ClusterRoutes
from fmq.errors import GroupProtocolConflict
from tests.cluster.kit import CLUSTER, known_everywhere, local_queues, wait_primary
from tests.server.harness import ServerProcess, json_lines, run_cli, wait_until

from .test_cluster_topics import TOPIC, group_coordinated_by, one_node_groups, topic_over_two_groups
from .wire import exchange, request_type

#: A topic routed over g1 only: FMQ's routing consumer of it joins g1 alone.
G1_TOPIC = "g1-only"
FMQ_OPTIONS = {"request_timeout": 3.0, "delivery_timeout": 8.0, "route_refresh_s": 1.0}


def _etcd_url(node: ServerProcess) -> str:
    args = list(node.extra_args)
    return args[args.index("--coordinator") + 1]


@contextmanager
def two_groups_and_a_g1_topic(tmp_path) -> Iterator[dict[str, ServerProcess]]:
    """:func:`topic_over_two_groups`, plus G1_TOPIC routed over g1 alone."""
    with topic_over_two_groups(tmp_path) as nodes:
        route = ClusterRoutes(_etcd_url(nodes["g1"]), CLUSTER).create(G1_TOPIC, 2, ["g1"])
        known_everywhere(nodes, G1_TOPIC, route.version)
        wait_until(lambda: local_queues(nodes["g1"], G1_TOPIC) == 2, 30,
                   "the g1-only topic's queues on g1")
        yield nodes


def _kafka_consumer(node: ServerProcess, group: str, topic: str = TOPIC) -> Consumer:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{node.kafka_port}",
                         "group.id": group, "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    return consumer


def _kafka_outcome(consumer: Consumer, timeout: float) -> tuple[list[int], bool]:
    """Poll ``consumer`` until it is assigned partitions or ``timeout`` passes: the error
    codes it reported meanwhile, and whether it got an assignment."""
    errors: list[int] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error():
            errors.append(msg.error().code())
        if consumer.assignment():
            return errors, True
    return errors, False


def _fmq_consumer(nodes: dict[str, ServerProcess], group: str, topic: str) -> FMQConsumer:
    """FMQ's routing consumer, given g1's address (it finds the other group in the route)."""
    return FMQConsumer(nodes["g1"].address, group, topic, **FMQ_OPTIONS)


def test_an_fmq_consumer_in_another_broker_group_is_refused_while_kafka_members_are_live(
        tmp_path):
    with two_groups_and_a_g1_topic(tmp_path) as nodes:
        group = group_coordinated_by(nodes, "g2", "fmq-refused")
        kafka = _kafka_consumer(nodes["g1"], group)
        try:
            errors, assigned = _kafka_outcome(kafka, 60)
            assert assigned, f"the Kafka member was not assigned (errors {errors})"
            # The routing consumer of G1_TOPIC joins g1 alone: the Kafka members are at
            # the coordinator, g2's primary.
            with pytest.raises(GroupProtocolConflict) as refused:
                _fmq_consumer(nodes, group, G1_TOPIC)
            assert refused.value.group == group and refused.value.members == 1
            assert "Stop them or use another group name" in str(refused.value)
        finally:
            kafka.close()  # LeaveGroup: the group has no Kafka member left
        fmq = _fmq_consumer(nodes, group, G1_TOPIC)  # the rule lifted
        try:
            assert fmq.member_id
        finally:
            fmq.close()


def test_a_kafka_join_at_the_coordinator_is_refused_while_fmq_members_live_elsewhere(tmp_path):
    with two_groups_and_a_g1_topic(tmp_path) as nodes:
        group = group_coordinated_by(nodes, "g2", "kafka-refused")
        fmq = _fmq_consumer(nodes, group, G1_TOPIC)  # a member in g1 only
        try:
            kafka = _kafka_consumer(nodes["g2"], group)
            try:
                errors, assigned = _kafka_outcome(kafka, 30)
                assert not assigned, "a Kafka member was let into a group FMQ consumers drive"
                assert KafkaError.INCONSISTENT_GROUP_PROTOCOL in errors
            finally:
                kafka.close()
        finally:
            fmq.close()  # GROUP_LEAVE: g1 has no FMQ member of the group left
        kafka = _kafka_consumer(nodes["g2"], group)
        try:
            errors, assigned = _kafka_outcome(kafka, 60)
            assert assigned, f"the Kafka member was not assigned once FMQ's left ({errors})"
        finally:
            kafka.close()


def test_members_of_one_protocol_join_over_both_broker_groups(tmp_path):
    with two_groups_and_a_g1_topic(tmp_path) as nodes:
        group = group_coordinated_by(nodes, "g2", "same-protocol")
        # FMQ: a member of the g1-only topic first, then one of the topic over both groups
        # (it joins g1's started group and starts g2's, the coordinator's).
        first = _fmq_consumer(nodes, group, G1_TOPIC)
        try:
            second = _fmq_consumer(nodes, group, TOPIC)
            try:
                wait_until(lambda: len(second.assignment) == 4 and len(first.assignment) == 2,
                           30, "both FMQ members' assignments")
            finally:
                second.close()
        finally:
            first.close()
        # Kafka: members given different broker groups' addresses join one group.
        other = group_coordinated_by(nodes, "g1", "same-protocol-kafka")
        members = [_kafka_consumer(nodes["g1"], other), _kafka_consumer(nodes["g2"], other)]
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not all(m.assignment() for m in members):
                for m in members:
                    msg = m.poll(0.2)
                    assert msg is None or not msg.error() or msg.error().code() != \
                        KafkaError.INCONSISTENT_GROUP_PROTOCOL
            assert all(m.assignment() for m in members), "the Kafka members did not settle"
        finally:
            for m in members:
                m.close()


def _join_group(node: ServerProcess, group: str) -> int | None:
    """A raw JoinGroup (v3: no member id round) of ``group`` for TOPIC: its error code
    (None: the node does not answer yet)."""
    cls = request_type(11, 3)
    module = __import__(cls.__module__, fromlist=["x"])
    metadata = b"\x00\x00" + b"\x00\x00\x00\x01" + len(TOPIC).to_bytes(2, "big") \
        + TOPIC.encode() + b"\xff\xff\xff\xff"
    try:
        _, answer = exchange(("127.0.0.1", node.kafka_port), cls(
            group_id=group, session_timeout=timedelta(seconds=6),
            rebalance_timeout=timedelta(seconds=6), member_id="",
            protocol_type="consumer", protocols=(module.JoinGroupRequestProtocol(
                name="range", metadata=metadata),)))
    except OSError:
        return None
    return answer.error_code


def _fmq_members(node: ServerProcess, group: str) -> dict:
    """The live FMQ members of ``group`` ``fmq groups`` shows on ``node`` (none of a group
    it does not know)."""
    shown = run_cli("groups", group, "--server", node.address, "--json")
    if shown.returncode != 0 and "UnknownGroup" in shown.stdout + shown.stderr:
        return {}
    assert shown.returncode == 0, shown.stderr
    return {m: q for g in json_lines(shown.stdout) for m, q in g["members"].items()}


def test_a_broker_group_that_cannot_be_asked_makes_the_join_retriable(tmp_path):
    with two_groups_and_a_g1_topic(tmp_path) as nodes:
        fmq_group = group_coordinated_by(nodes, "g2", "unasked-fmq")
        kafka_group = group_coordinated_by(nodes, "g2", "unasked-kafka")
        # The group's Kafka coordinator, g2's primary, is away: the FMQ join starting the
        # group in g1 is answered GroupProtocolUnchecked (retriable), which the routing
        # consumer retries; g1 takes no member meanwhile.
        nodes["g2"].kill()
        fmq = _fmq_consumer(nodes, fmq_group, G1_TOPIC)
        try:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                assert fmq.poll(0.2) == [] and fmq.assignment == []
            assert _fmq_members(nodes["g1"], fmq_group) == {}
            nodes["g2"].start()
            wait_primary(nodes["g2"])
            deadline = time.monotonic() + 60
            while len(fmq.assignment) != 2 and time.monotonic() < deadline:
                fmq.poll(0.2)
            assert len(fmq.assignment) == 2, "the join was not taken once g2 was back"
        finally:
            fmq.close()
        # g1 is away: a Kafka join at the coordinator cannot ask it, and is answered
        # COORDINATOR_LOAD_IN_PROGRESS (retried by Kafka clients); taken once g1 is back.
        nodes["g1"].kill()
        wait_until(lambda: _join_group(nodes["g2"], kafka_group)
                   == ErrorCode.coordinator_load_in_progress, 30,
                   "JoinGroup answered COORDINATOR_LOAD_IN_PROGRESS")
        nodes["g1"].start()
        wait_until(lambda: _join_group(nodes["g2"], kafka_group) == ErrorCode.none, 60,
                   "JoinGroup taken once g1 is back")


#: A topic routed over g2 only, for the Kafka members of the door-less cluster below.
G2_TOPIC = "g2-only"


@contextmanager
def g1_without_the_door(tmp_path) -> Iterator[dict[str, ServerProcess]]:
    """Two one-node broker groups of one cluster, g1 started without ``--kafka-port`` and
    g2 with it (so g2 coordinates every consumer group's Kafka members), G1_TOPIC routed
    over g1 alone and G2_TOPIC over g2 alone; killed at exit."""
    with one_node_groups(tmp_path, {"g1": False, "g2": True}) as (etcd_url, nodes):
        store = ClusterRoutes(etcd_url, CLUSTER)
        for topic, group in ((G1_TOPIC, "g1"), (G2_TOPIC, "g2")):
            route = store.create(topic, 2, [group])
            known_everywhere(nodes, topic, route.version)
            wait_until(lambda t=topic, g=group: local_queues(nodes[g], t) == 2, 30,
                       f"{topic}'s queues on {group}")
        yield nodes


def test_a_node_without_the_kafka_door_refuses_fmq_joins_beside_live_kafka_members(tmp_path):
    """The one-protocol rule on a broker group started without the Kafka door: it asks the
    group's Kafka coordinator (g2) all the same. Before, only a node with the door asked, so
    g1 took FMQ consumers into a group driven by live Kafka members at g2."""
    with g1_without_the_door(tmp_path) as nodes:
        group = "doorless"
        fmq = _fmq_consumer(nodes, group, G1_TOPIC)  # no Kafka member: taken
        try:
            assert fmq.member_id
        finally:
            fmq.close()  # GROUP_LEAVE: the group has no FMQ member left
        kafka = _kafka_consumer(nodes["g2"], group, G2_TOPIC)
        try:
            errors, assigned = _kafka_outcome(kafka, 60)
            assert assigned, f"the Kafka member was not assigned (errors {errors})"
            with pytest.raises(GroupProtocolConflict) as refused:
                _fmq_consumer(nodes, group, G1_TOPIC)
            assert refused.value.group == group and refused.value.members == 1
            assert _fmq_members(nodes["g1"], group) == {}
        finally:
            kafka.close()  # LeaveGroup: the group has no Kafka member left
        fmq = _fmq_consumer(nodes, group, G1_TOPIC)  # the rule lifted
        try:
            assert fmq.member_id
        finally:
            fmq.close()
