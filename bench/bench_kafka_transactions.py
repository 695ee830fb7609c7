"""What Kafka transactions cost through FMQ's Kafka door: transactions of 100 messages
against plain ``acks=all`` produce of the same messages, side by side.

A real ``fmq server --kafka-port`` subprocess on 127.0.0.1, default flush mode (every
acknowledgement after fdatasync), 1 KiB bodies, one confluent-kafka (librdkafka) producer
per workload in this process, one partition. A unit of work is 100 messages:

* ``plain``: ``acks=all``, produce the 100 messages, ``flush()`` (every one acknowledged);
* ``transaction``: ``begin_transaction()``, produce the 100, ``commit_transaction()``
  (AddPartitionsToTxn, the Produce requests as FMQ prepares, EndTxn: the decision, the
  COMMITs, the end state; docs/kafka.md, *Exactly-once*).

Each workload runs ``--rounds`` times, alternately on the same server (both see the same
disk and machine load), for ``--seconds`` each; the report gives the median messages/s of
each and their ratio (transaction / plain).

Not part of the test run. Run (a few times at most on a shared machine)::

    python bench/bench_kafka_transactions.py [--seconds 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import tempfile
import time

from bench_async_producer import BODY
from bench_network import free_port, start_server

MESSAGES = 100


def run_plain(bootstrap: str, seconds: float) -> float:
    """messages/s of units of MESSAGES produced with acks=all and flushed."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    return _timed(seconds, lambda: _plain_unit(producer))


def _plain_unit(producer) -> None:  # noqa: ANN001 - a confluent_kafka.Producer
    for _ in range(MESSAGES):
        producer.produce("bench-plain", BODY, partition=0)
    assert producer.flush(60) == 0


def run_transactions(bootstrap: str, seconds: float, round_no: int) -> float:
    """messages/s of transactions of MESSAGES messages, each committed."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1,
                         "transactional.id": f"bench-txn-{round_no}",
                         "metadata.recovery.strategy": "none"})
    producer.init_transactions(30)
    return _timed(seconds, lambda: _transaction_unit(producer))


def _transaction_unit(producer) -> None:  # noqa: ANN001 - a confluent_kafka.Producer
    producer.begin_transaction()
    for _ in range(MESSAGES):
        producer.produce("bench-txn", BODY, partition=0)
    producer.commit_transaction(60)


def _timed(seconds: float, unit) -> float:  # noqa: ANN001 - a callable
    unit()  # warm: connections, metadata, the topic created
    units = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        unit()
        units += 1
    return units * MESSAGES / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="bench-ktxn-")
    port, kafka_port = free_port(), free_port()
    server = start_server(os.path.join(base, "data"), port, "--kafka-port", str(kafka_port))
    bootstrap = f"127.0.0.1:{kafka_port}"
    rates: dict[str, list[float]] = {"plain": [], "transaction": []}
    try:
        for round_no in range(args.rounds):
            rates["plain"].append(run_plain(bootstrap, args.seconds))
            rates["transaction"].append(run_transactions(bootstrap, args.seconds, round_no))
    finally:
        os.kill(server.pid, signal.SIGTERM)
        server.wait(30)
        shutil.rmtree(base, ignore_errors=True)
    plain = statistics.median(rates["plain"])
    txn = statistics.median(rates["transaction"])
    print(f"Kafka door, confluent-kafka, units of {MESSAGES} x 1 KiB, median of "
          f"{args.rounds} rounds of {args.seconds:g}s each, alternating")
    print(f"{'plain acks=all':<22} {plain:>10,.0f} msgs/s  rounds "
          f"{[round(x) for x in rates['plain']]}")
    print(f"{'transactions':<22} {txn:>10,.0f} msgs/s  rounds "
          f"{[round(x) for x in rates['transaction']]}")
    print(f"ratio transactions / plain: {txn / plain:.2f}")


if __name__ == "__main__":
    main()
