"""Committing Kafka groups over broker groups in a cluster with users: the coordinator checks
the Kafka user's rules, and forwards the other broker group's partitions logged in as its
``follow_user`` (docs/kafka.md, *Consumer groups over broker groups*). A ``follow_user``
without rights on the consumer group is refused there: the client gets an error, never a
success, and the coordinator's log names the rule to add."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from fmq.client import Client
from fmq.coordination.routes import ClusterRoutes
from fmq.protocol import Op
from fmq.server.kafka.group_placement import rendezvous_choice
from tests.etcdkit import EtcdProcess
from tests.security.conftest import PASSWORD, add_rule_offline, add_user_offline
from tests.server.conftest import FAST
from tests.server.harness import ServerProcess, free_port, wait_until

pytestmark = pytest.mark.timeout(300)

CLUSTER = "c1"
TOPIC = "spread"
ADMIN = {"user": "admin", "password": PASSWORD}
#: The user each group's node forwards as: g2's may do everything, g1's nothing.
FOLLOW_USER = {"g1": "weak", "g2": "admin"}


def _group_coordinated_by(broker_group: str, prefix: str) -> str:
    return next(f"{prefix}-{i}" for i in range(200)
                if rendezvous_choice(f"{prefix}-{i}", ["g1", "g2"]) == broker_group)


def _admin_call(node: ServerProcess, op: Op, fields: dict) -> dict:
    with Client(node.address, retries=0, request_timeout=20, **ADMIN) as c:
        return c.call(op, fields)


def _queues(node: ServerProcess) -> int:
    try:
        answer = _admin_call(node, Op.TOPIC_DESCRIBE, {"topic": TOPIC})
    except Exception:  # noqa: BLE001 - not made yet
        return 0
    return json.loads(answer["json"])["topic"]["queues"]


def _committed(node: ServerProcess, group: str) -> dict[int, int]:
    answer = json.loads(_admin_call(node, Op.GROUPS, {"group": group})["json"])
    return {r["queue_id"]: r["committed"] for g in answer["groups"] for r in g["offsets"]
            if r["topic"] == TOPIC and r["committed"] is not None}


@pytest.fixture
def secured_groups(tmp_path, monkeypatch):
    """Broker groups g1 and g2 of one node each with users admin, alice (may produce to and
    consume TOPIC, and use the consumer groups ``ledger-*``) and weak (no rule), the Kafka
    door open, and TOPIC routed over both with two queues each."""
    monkeypatch.setenv("FMQ_PASSWORD", PASSWORD)
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    etcd = EtcdProcess(str(tmp_path / "etcd")).start()
    routes = ClusterRoutes(etcd.url, CLUSTER)
    nodes: dict[str, ServerProcess] = {}
    try:
        for name in ("g1", "g2"):
            data_dir = str(tmp_path / name)
            for user in ("admin", "alice", "weak"):
                add_user_offline(data_dir, user)
            for rule in (("admin", "all", "--cluster"), ("admin", "all", "--topic", "", "--prefix"),
                         ("admin", "all", "--group", "", "--prefix"),
                         ("alice", "produce", "--topic", TOPIC),
                         ("alice", "consume", "--topic", TOPIC),
                         ("alice", "all", "--group", "ledger-", "--prefix")):
                add_rule_offline(data_dir, "--principal", rule[0], "--operation", rule[1],
                                 *rule[2:])
            routes.register_group(name)
            config = {**FAST, "server": {**FAST["server"], "lease_ttl_s": 3,
                                         "follow_user": FOLLOW_USER[name],
                                         "follow_password_file": str(password_file)}}
            kafka_port = free_port()
            node = ServerProcess(data_dir, config, client_options=ADMIN, extra_args=(
                "--coordinator", etcd.url, "--cluster-name", CLUSTER, "--group", name,
                "--node", f"{name}-n1", "--kafka-port", str(kafka_port)))
            node.kafka_port = kafka_port
            nodes[name] = node.start()
            wait_until(lambda n=name, a=node.address: routes.groups()[n].primary == a, 60,
                       f"{name}'s server to lead its group")
        routes.create(TOPIC, 2, ["g1", "g2"])
        for node in nodes.values():
            wait_until(lambda n=node: _queues(n) == 2, 30, "the route's queues made")
        yield nodes
    finally:
        for node in nodes.values():
            node.kill()
        etcd.stop()


def _alice(node: ServerProcess, **extra: object) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{node.kafka_port}",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice", "sasl.password": PASSWORD, **extra}


def _commit(node: ServerProcess, group: str, offsets: dict[int, int]) -> None:
    consumer = Consumer(_alice(node, **{"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in offsets])
        consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def test_forwarded_commits_log_in_as_the_follow_user(secured_groups):
    g1, g2 = secured_groups["g1"], secured_groups["g2"]
    producer = Producer(_alice(g1, acks="all"))
    for p in range(4):
        for i in range(5):
            producer.produce(TOPIC, b"m%d" % i, partition=p)
    assert producer.flush(60) == 0

    # Coordinated by g2, whose follow_user may commit: partition 0 is forwarded to g1.
    at_g2 = _group_coordinated_by("g2", "ledger")
    _commit(g1, at_g2, {0: 2, 2: 3})
    assert _committed(g1, at_g2) == {0: 2}
    assert _committed(g2, at_g2) == {0: 3}

    # Coordinated by g1, whose follow_user has no rule: g2 refuses the forwarded commit,
    # the client is told (never a success) and g1's log says what to grant.
    at_g1 = _group_coordinated_by("g1", "ledger")
    with pytest.raises(KafkaException) as refused:
        _commit(g2, at_g1, {0: 2, 2: 3})
    assert refused.value.args[0].code() == KafkaError.UNKNOWN, refused.value
    assert _committed(g2, at_g1) == {}
    wait_until(lambda: "follow_user needs commit-offsets" in g1.log(), 10,
               "g1's log to name the rule its follow_user lacks")
