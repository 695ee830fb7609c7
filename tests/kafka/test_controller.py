"""Kafka's controller on a replication group electing through etcd: Metadata and
DescribeCluster name the group's primary as the controller, whichever node is asked, so an
AdminClient given only a follower's address sends its topic changes to the primary; a
follower asked for one answers NOT_CONTROLLER. After the primary is SIGKILLed, the
controller named is the new primary."""

from __future__ import annotations

import datetime
import time

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kio.schema.errors import ErrorCode

from fmq.server.kafka.brokers import node_id

from .test_replication import KafkaFailoverGroup
from .wire import exchange, request_type


def _admin(node) -> AdminClient:
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{node.kafka_port}"})


def _wait_controller(node, want: int, brokers: int, timeout: float = 30) -> None:
    """Until ``node``'s Metadata names ``brokers`` brokers and ``want`` as the controller."""
    admin = _admin(node)
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        meta = admin.list_topics(timeout=10)
        seen = (meta.controller_id, len(meta.brokers))
        if seen == (want, brokers):
            return
        time.sleep(0.2)
    raise AssertionError(f"Metadata of {node.name}: controller, brokers = {seen}, not "
                         f"{(want, brokers)}")


def _topics_of(node) -> dict[str, int]:
    meta = _admin(node).list_topics(timeout=10)
    return {name: len(t.partitions) for name, t in meta.topics.items()}


def create_topics_request(name: str, partitions: int):
    cls = request_type(19, 7)
    module = __import__(cls.__module__, fromlist=["x"])
    topic = module.CreatableTopic(name=name, num_partitions=partitions, replication_factor=-1,
                                  assignments=(), configs=())
    return cls(topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False)


def _admin_changes_through(follower, topic: str) -> None:
    """Every topic change an AdminClient makes, given only ``follower``'s address."""
    admin = _admin(follower)
    admin.create_topics([NewTopic(topic, num_partitions=2)])[topic].result(30)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[ConfigEntry(
        "retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)


def test_an_admin_client_at_a_follower_changes_topics_through_the_primary(tmp_path):
    group = KafkaFailoverGroup(str(tmp_path)).start()
    try:
        primary = group.wait_whole()
        follower, other = group.others(primary)
        for node in group.nodes:  # every node names the primary
            _wait_controller(node, node_id("g", primary.name), 3)
        at_follower = _admin(follower)  # kept: a dropped client cancels its requests
        cluster = at_follower.describe_cluster().result(30)
        assert cluster.controller.id == node_id("g", primary.name)

        # A follower asked directly refuses, as a Kafka broker that is not the controller.
        _, answer = exchange(("127.0.0.1", follower.kafka_port),
                             create_topics_request("asked-of-a-follower", 1))
        [result] = answer.topics
        assert result.error_code == ErrorCode.not_controller, result
        assert "follower" in result.error_message
        assert "asked-of-a-follower" not in _topics_of(primary)

        _admin_changes_through(follower, "made-at-a-follower")
        assert _topics_of(primary)["made-at-a-follower"] == 3
        at_follower.delete_topics(["made-at-a-follower"])["made-at-a-follower"].result(30)
        assert "made-at-a-follower" not in _topics_of(primary)

        primary.kill()  # SIGKILL: the controller moves with the primary
        survivor = group.wait_primary(among=[follower, other], timeout=60)
        asked = other if survivor is follower else follower
        _wait_controller(asked, node_id("g", survivor.name), 3)
        _admin_changes_through(asked, "made-after-the-kill")
        assert _topics_of(survivor)["made-after-the-kill"] == 3
    except AssertionError:
        print(group.logs())
        raise
    finally:
        group.kill()
