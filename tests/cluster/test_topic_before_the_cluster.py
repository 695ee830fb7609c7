"""A topic made before its broker joined a cluster keeps every queue: the route its first
ROUTE creates gives the group as many queues as the topic has (not queues_per_topic), so a
routing consumer reads the messages stored in its last queues too."""

from __future__ import annotations

import os

import pytest

from fmq.client import Client, Consumer, Producer
from tests.etcdkit import ETCD, EtcdProcess
from tests.server.harness import ServerProcess

from .kit import CLUSTER, CONFIG, QUEUES_PER_TOPIC, route, wait_primary

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

QUEUES = QUEUES_PER_TOPIC + 3


@pytest.mark.parametrize("auto_create", [True, False])
def test_a_topic_made_before_the_cluster_keeps_its_queues_in_its_route(tmp_path, auto_create):
    """With ``auto_create_topics`` off too: routing an existing topic creates no topic."""
    data = str(tmp_path / "g1")
    config = {**CONFIG, "auto_create_topics": auto_create}
    alone = ServerProcess(data, config).start()
    try:
        with Client(alone.address) as c:
            c.create_topic("old", queues=QUEUES)
        with Producer(alone.address) as p:
            for q in range(QUEUES):
                p.send("old", f"q{q}".encode(), queue_id=q)
    finally:
        alone.stop()
    etcd = EtcdProcess(str(tmp_path / "etcd")).start()
    node = ServerProcess(data, config, extra_args=(
        "--coordinator", etcd.url, "--cluster-name", CLUSTER, "--group", "g1",
        "--node", "g1-n1"))
    try:
        node.start()
        wait_primary(node)
        answer = route(node, "old")
        assert [g["queues"] for g in answer["groups"]] == [QUEUES], answer
        got: set[bytes] = set()
        with Consumer(node.address, "readers", ["old"]) as consumer:
            for _ in range(60):
                got.update(bytes(m.body) for m in consumer.poll(0.5))
                if len(got) == QUEUES:
                    break
        assert got == {f"q{q}".encode() for q in range(QUEUES)}
    finally:
        node.kill()
        etcd.stop()
