"""What a Kafka transaction costs in log flushes (fsyncs), counted by the real server's
STATS around transactions of a confluent-kafka (librdkafka) producer and around bare
Produce requests (docs/kafka.md, *Exactly-once*): each Produce request's prepares (one per
partition) are made durable together by one flush before its answer, and EndTxn makes
its decision, the COMMITs and the offsets durable with one more (the decision needs none
of its own: the log is durable as a prefix, so no COMMIT survives a crash without the
decision before it; tests/kafka/test_transactions_crash_points.py kills the server inside
that one write)."""

from __future__ import annotations

import datetime
import json

from fmq.client import Client
from fmq.protocol import Op

from .test_transactions import queue_ends, transactional_producer
from .wire import exchange, request_type

TRANSACTIONS = 3
MESSAGES = 10


def log_flushes(srv) -> int:
    """The server's log flushes (fdatasync rounds) so far."""
    with Client(srv.address) as client:
        return json.loads(client.call(Op.STATS, {})["json"])["flushes"]


def test_a_one_partition_transaction_flushes_its_prepare_and_then_end_txn_once(
        kafka_server):
    srv = kafka_server()
    producer = transactional_producer(srv.bootstrap, "flush-count")

    def transaction(number: int) -> None:
        producer.begin_transaction()
        for i in range(MESSAGES):
            producer.produce("txn-flushes", value=b"t%d-%d" % (number, i), partition=0)
        producer.commit_transaction(30)

    transaction(0)  # warm: the topic made, the connections and metadata
    before = log_flushes(srv)
    for number in range(1, TRANSACTIONS + 1):
        transaction(number)
    flushes = log_flushes(srv) - before
    # one Produce (the prepare) and EndTxn per transaction: before, EndTxn took two (its
    # decision, then the COMMIT with it)
    assert flushes == 2 * TRANSACTIONS, f"{flushes} flushes for {TRANSACTIONS} transactions"
    assert queue_ends(srv, "txn-flushes", 1) == [MESSAGES * (TRANSACTIONS + 1)]


def _batch(values: list[bytes], producer_id: int, epoch: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=producer_id,
        producer_epoch=epoch, base_sequence=0, batch_size=1 << 20)
    for value in values:
        builder.append(0, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


def test_one_produce_request_s_prepares_share_one_flush_and_fencing_stays_exact(
        kafka_server):
    """One bare Produce request of four partitions: one flush for the four prepares. Then
    the same request from a producer a newer epoch fenced: every partition refused with
    PRODUCER_FENCED, nothing flushed, nothing prepared."""
    srv = kafka_server()
    address = ("127.0.0.1", srv.kafka_port)
    txn_id, topic = "flush-wire", "txn-flushes-wire"
    with Client(srv.address) as client:
        client.create_topic(topic, queues=4)

    def init() -> tuple[int, int]:
        _, answer = exchange(address, request_type(22, 4)(
            transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1, producer_epoch=-1))
        assert answer.error_code == 0, answer
        return answer.producer_id, answer.producer_epoch

    def add_partitions(pid: int, epoch: int) -> None:
        add = request_type(24, 3)
        entities = __import__(add.__module__, fromlist=["x"])
        _, added = exchange(address, add(
            v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
                entities.AddPartitionsToTxnTopic(name=topic, partitions=(0, 1, 2, 3)),)))
        assert all(p.partition_error_code == 0
                   for p in added.results_by_topic_v3_and_below[0].results_by_partition)

    def produce(pid: int, epoch: int) -> list[int]:
        request = request_type(0, 9)
        entities = __import__(request.__module__, fromlist=["x"])
        _, produced = exchange(address, request(
            transactional_id=txn_id, acks=-1, timeout=datetime.timedelta(seconds=10),
            topic_data=(entities.TopicProduceData(name=topic, partition_data=tuple(
                entities.PartitionProduceData(
                    index=p, records=_batch([b"p%d-%d" % (p, i) for i in range(3)],
                                            pid, epoch))
                for p in range(4))),)))
        return [r.error_code for r in produced.responses[0].partition_responses]

    pid, epoch = init()
    add_partitions(pid, epoch)
    before = log_flushes(srv)
    assert produce(pid, epoch) == [0, 0, 0, 0]
    assert log_flushes(srv) - before == 1  # before: 4, one per partition
    with Client(srv.address) as client:
        prepared = [t for t in client.call(Op.LIST_TX, {})["transactions"]
                    if t["tx_id"].startswith(f"{pid}.{epoch}.")]
    assert len(prepared) == 4, prepared

    newer_pid, newer_epoch = init()  # fences the first producer, aborts its transaction
    assert (newer_pid, newer_epoch) == (pid, epoch + 1)
    before = log_flushes(srv)
    assert produce(pid, epoch) == [90] * 4  # PRODUCER_FENCED, each partition
    assert log_flushes(srv) - before == 0
    assert queue_ends(srv, topic, 4) == [0, 0, 0, 0]
