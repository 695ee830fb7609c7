"""A transaction's offsets (TxnOffsetCommit, ``send_offsets_to_transaction``) of a topic
routed over two broker groups: partition ``base + q`` is committed in the transaction's
group's queue ``q``, and a partition another group hosts is refused (a transaction stays
in one broker group), never written into this group's queue of the same number."""

from __future__ import annotations

import datetime

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from tests.server.harness import wait_until

from .test_cluster_topics import _fmq_committed, topic_over_two_groups
from .wire import exchange, request_type

TOPIC = "spread"  # the name test_cluster_topics' helpers read


def _txn(node, request):
    return exchange(("127.0.0.1", node.kafka_port), request)[1]


def _offsets_request(transactional_id: str, ids, group: str, offsets: dict[int, int]):
    cls = request_type(28, 2)
    module = __import__(cls.__module__, fromlist=["x"])
    parts = tuple(module.TxnOffsetCommitRequestPartition(
        partition_index=p, committed_offset=o, committed_leader_epoch=-1,
        committed_metadata="") for p, o in offsets.items())
    return cls(transactional_id=transactional_id, group_id=group, producer_id=ids[0],
               producer_epoch=ids[1],
               topics=(module.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=parts),))


def test_a_transactions_offsets_go_to_its_own_groups_queues(tmp_path):
    with topic_over_two_groups(tmp_path) as nodes:
        g2 = nodes["g2"]  # hosts partitions 2 and 3 as its queues 0 and 1
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{g2.kafka_port}", "acks": "all"})
        for p in range(4):
            for _ in range(5):
                producer.produce(TOPIC, b"m", partition=p)
        assert producer.flush(60) == 0

        answer = _txn(g2, request_type(22, 1)(
            transactional_id="mover", transaction_timeout=datetime.timedelta(seconds=60)))
        assert answer.error_code == ErrorCode.none
        ids = (answer.producer_id, answer.producer_epoch)
        assert _txn(g2, request_type(25, 1)(
            transactional_id="mover", producer_id=ids[0], producer_epoch=ids[1],
            group_id="mover-group")).error_code == ErrorCode.none

        # Partition 0 is g1's: refused, whatever g2's queue 0 holds.
        refused = _txn(g2, _offsets_request("mover", ids, "mover-group", {0: 4}))
        assert {p.partition_index: p.error_code for t in refused.topics
                for p in t.partitions} == {0: ErrorCode.invalid_request}
        # Partition 3 is g2's queue 1.
        taken = _txn(g2, _offsets_request("mover", ids, "mover-group", {3: 2}))
        assert {p.partition_index: p.error_code for t in taken.topics
                for p in t.partitions} == {3: ErrorCode.none}
        assert _txn(g2, request_type(26, 1)(
            transactional_id="mover", producer_id=ids[0], producer_epoch=ids[1],
            committed=True)).error_code == ErrorCode.none
        wait_until(lambda: _fmq_committed(g2, "mover-group") == {1: 2}, 30,
                   "the transaction's offset in g2's queue 1, and nothing in its queue 0")
        assert _fmq_committed(nodes["g1"], "mover-group") == {}
