"""What Kafka transactions cost through FMQ's Kafka door: transactions of 100 messages
against plain ``acks=all`` produce of the same messages, side by side.

A real ``fmq server --kafka-port`` subprocess on 127.0.0.1, default flush mode (every
acknowledgement after fdatasync), 1 KiB bodies, one confluent-kafka (librdkafka) producer
per workload in this process, one partition. A unit of work is 100 messages:

* ``plain``: ``acks=all``, produce the 100 messages, ``flush()`` (every one acknowledged);
* ``transaction``: ``begin_transaction()``, produce the 100, ``commit_transaction()``
  (AddPartitionsToTxn, the Produce requests as FMQ prepares, EndTxn: the decision, the
  COMMITs, the end state; docs/kafka.md, *Exactly-once*).

``--partitions P`` spreads each unit's messages over P partitions (one Produce request and
one FMQ transaction per partition at least: P COMMITs for EndTxn). The report also gives
the server's log flushes (fsyncs) per transaction, from its STATS.

Each workload runs ``--rounds`` times, alternately on the same server (both see the same
disk and machine load), for ``--seconds`` each; the report gives the median messages/s of
each and their ratio (transaction / plain).

Not part of the test run. Run (a few times at most on a shared machine)::

    python bench/bench_kafka_transactions.py [--seconds 4] [--rounds 3] [--partitions 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import tempfile
import time

from bench_async_producer import BODY
from bench_network import free_port, start_server

MESSAGES = 100


def run_plain(bootstrap: str, seconds: float, partitions: int) -> tuple[float, int]:
    """messages/s of units of MESSAGES produced with acks=all and flushed; units run."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    return _timed(seconds, lambda: _plain_unit(producer, partitions))


def _plain_unit(producer, partitions: int) -> None:  # noqa: ANN001 - a confluent Producer
    for i in range(MESSAGES):
        producer.produce("bench-plain", BODY, partition=i % partitions)
    assert producer.flush(60) == 0


def run_transactions(bootstrap: str, seconds: float, round_no: int,
                     partitions: int) -> tuple[float, int]:
    """messages/s of transactions of MESSAGES messages, each committed; units run."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1,
                         "transactional.id": f"bench-txn-{round_no}",
                         "metadata.recovery.strategy": "none"})
    producer.init_transactions(30)
    return _timed(seconds, lambda: _transaction_unit(producer, partitions))


def _transaction_unit(producer, partitions: int) -> None:  # noqa: ANN001 - a confluent Producer
    producer.begin_transaction()
    for i in range(MESSAGES):
        producer.produce("bench-txn", BODY, partition=i % partitions)
    producer.commit_transaction(60)


def _timed(seconds: float, unit) -> tuple[float, int]:  # noqa: ANN001 - a callable
    unit()  # warm: connections, metadata, the topic created
    units = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        unit()
        units += 1
    return units * MESSAGES / (time.perf_counter() - start), units + 1


def log_flushes(address: str) -> int:
    """The server's log flushes (fdatasync rounds) so far."""
    from fmq.client import Client
    from fmq.protocol import Op

    with Client(address) as client:
        return json.loads(client.call(Op.STATS, {})["json"])["flushes"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="bench-ktxn-")
    port, kafka_port = free_port(), free_port()
    server = start_server(os.path.join(base, "data"), port, "--kafka-port", str(kafka_port))
    bootstrap = f"127.0.0.1:{kafka_port}"
    address = f"127.0.0.1:{port}"
    _create_topics(bootstrap, args.partitions)
    rates: dict[str, list[float]] = {"plain": [], "transaction": []}
    flushes = units = 0
    try:
        for round_no in range(args.rounds):
            rates["plain"].append(run_plain(bootstrap, args.seconds, args.partitions)[0])
            before = log_flushes(address)
            rate, done = run_transactions(bootstrap, args.seconds, round_no, args.partitions)
            flushes += log_flushes(address) - before
            units += done
            rates["transaction"].append(rate)
    finally:
        os.kill(server.pid, signal.SIGTERM)
        server.wait(30)
        shutil.rmtree(base, ignore_errors=True)
    plain = statistics.median(rates["plain"])
    txn = statistics.median(rates["transaction"])
    print(f"Kafka door, confluent-kafka, units of {MESSAGES} x 1 KiB over "
          f"{args.partitions} partition(s), median of {args.rounds} rounds of "
          f"{args.seconds:g}s each, alternating")
    print(f"{'plain acks=all':<22} {plain:>10,.0f} msgs/s  rounds "
          f"{[round(x) for x in rates['plain']]}")
    print(f"{'transactions':<22} {txn:>10,.0f} msgs/s  rounds "
          f"{[round(x) for x in rates['transaction']]}")
    print(f"ratio transactions / plain: {txn / plain:.2f}")
    print(f"log flushes per transaction: {flushes / units:.2f} (init and AddPartitionsToTxn "
          f"included)")


def _create_topics(bootstrap: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions) for t in
                                       ("bench-plain", "bench-txn")]).values():
        future.result(30)


if __name__ == "__main__":
    main()
