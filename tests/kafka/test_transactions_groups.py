"""A Kafka transaction stays in one broker group (docs/kafka.md, *Exactly-once*): a
transaction producing to partitions of a topic routed over two groups is refused at
AddPartitionsToTxn (INVALID_REQUEST), before anything is prepared in either group, and the
producer aborts it and carries on; a transaction within one group's partitions commits."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer

from tests.cluster.kit import queue_range
from tests.server.harness import wait_until

from .test_cluster_topics import PER_GROUP, both_leaders_known, topic_over_two_groups
from .test_transactions import NO_REBOOTSTRAP

TOPIC = "spread"  # the name test_cluster_topics' helpers read


def test_a_transaction_over_two_broker_groups_is_refused_before_anything_is_stored(
        tmp_path):
    with topic_over_two_groups(tmp_path) as nodes:
        bootstrap = f"127.0.0.1:{nodes['g1'].kafka_port}"
        wait_until(lambda: both_leaders_known(bootstrap), 30,
                   "Metadata to name each group's primary for its partitions")

        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "spread-1",
                             "transaction.timeout.ms": 60_000, **NO_REBOOTSTRAP})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(TOPIC, b"g1", partition=0)  # g1's queue 0
        producer.produce(TOPIC, b"g2", partition=2)  # g2's queue 0
        with pytest.raises(KafkaException) as refused:
            producer.commit_transaction(30)
        assert "invalid request" in str(refused.value).lower(), refused.value
        producer.abort_transaction(30)
        # The transaction's coordinator (the primary of the group whose node librdkafka
        # asked: either, as it knows both) logs the refusal; its log reaches the file
        # soon after the answer.
        wait_until(lambda: any("are hosted by another broker group" in node.log()
                               for node in nodes.values()), 10,
                   "a server log naming the partitions another group hosts")
        (home,) = [g for g, node in nodes.items()
                   if "are hosted by another broker group" in node.log()]
        for group in ("g1", "g2"):
            for queue in range(PER_GROUP):
                assert queue_range(nodes[group], TOPIC, queue) == (0, 0)

        producer.begin_transaction()  # within the coordinator's group: commits
        producer.produce(TOPIC, b"one group", partition=PER_GROUP * ("g1", "g2").index(home))
        producer.commit_transaction(30)
        assert queue_range(nodes[home], TOPIC, 0) == (0, 1)
