"""What a Kafka transaction costs in log flushes (fsyncs), counted by the real server's
STATS around transactions of a confluent-kafka (librdkafka) producer (docs/kafka.md,
*Exactly-once*): each Produce's prepare is made durable before its answer, and EndTxn
makes its decision, the COMMITs and the offsets durable with one more flush (the decision
needs none of its own: the log is durable as a prefix, so no COMMIT survives a crash
without the decision before it; tests/kafka/test_transactions_crash_points.py kills the
server inside that one write)."""

from __future__ import annotations

import json

from fmq.client import Client
from fmq.protocol import Op

from .test_transactions import queue_ends, transactional_producer

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
