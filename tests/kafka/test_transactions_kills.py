"""Kafka transactions through kill -9 of the client, and of the client and the server
together (docs/kafka.md, *Exactly-once*): a consume-transform-produce loop in its own
process (confluent-kafka), SIGKILLed while a transaction is open, then started again (its
init_transactions fences the killed producer and aborts what it left open) or left dead
(the server aborts the open transaction at transaction.timeout.ms). Run to the end, the
output holds every input exactly once and the group's offset says all were read.

Run as a script, this module is the loop itself (``main``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from .test_transactions import (
    NO_REBOOTSTRAP,
    committed_offset,
    committed_offset_retrying,
    queue_ends,
    read_committed,
)

GROUP = "kills"
BATCH = 10


def main(bootstrap: str, source: str, sink: str, transactional_id: str,
         timeout_ms: int) -> None:
    """The loop: from the group's committed offset, transactions of up to BATCH messages
    (values upper-cased, with the offsets), until 3 s pass with nothing new. Prints
    ``open N`` once a transaction's messages are sent and before it ends, then waits a
    moment, so that a kill lands inside the transaction."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", **NO_REBOOTSTRAP})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": timeout_ms, **NO_REBOOTSTRAP})
    producer.init_transactions(30)
    consumer.assign([TopicPartition(source, 0)])  # the committed offset (or the earliest)
    idle_since = time.monotonic()
    opened = 0
    while time.monotonic() - idle_since < 3:
        msgs = [m for m in consumer.consume(BATCH, 0.5) if m.error() is None]
        if not msgs:
            continue
        idle_since = time.monotonic()
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, value=m.value().upper(), partition=0)
        producer.flush(30)  # the Produce requests are answered: prepared on the server
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, msgs[-1].offset() + 1)],
            consumer.consumer_group_metadata(), 30)
        opened += 1
        print(f"open {opened}", flush=True)
        time.sleep(0.3)
        producer.commit_transaction(30)
    consumer.close()


def start_loop(srv, source: str, sink: str, transactional_id: str = "kills-1",
               timeout_ms: int = 60_000) -> subprocess.Popen:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.kafka.test_transactions_kills", srv.bootstrap, source,
         sink, transactional_id, str(timeout_ms)],
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def kill_when_open(loop: subprocess.Popen, nth: int, timeout: float = 120,
                   server=None) -> None:
    """SIGKILL ``loop`` once its ``nth`` transaction is open (sent, not ended); with
    ``server``, SIGKILL the server in the same instant."""
    with loop.stdout:
        _kill_when_open(loop, nth, timeout, server)


def _kill_when_open(loop: subprocess.Popen, nth: int, timeout: float, server) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = loop.stdout.readline()
        if not line:
            raise AssertionError(f"the loop ended (exit {loop.wait(10)}) before its "
                                 f"transaction {nth} opened")
        if line.strip() == f"open {nth}":
            loop.send_signal(signal.SIGKILL)
            if server is not None:
                server.kill()
            loop.wait(10)
            return
    loop.kill()
    raise AssertionError(f"transaction {nth} of the loop did not open within {timeout} s")


def finish(loop: subprocess.Popen, timeout: float = 300) -> None:
    try:
        loop.communicate(timeout=timeout)  # until it exits
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait(10)
    assert loop.returncode == 0


def fill(srv, topic: str, count: int) -> list[bytes]:
    values = [b"%s-%03d" % (topic.encode(), i) for i in range(count)]
    plain = Producer({"bootstrap.servers": srv.bootstrap})
    for value in values:
        plain.produce(topic, value=value, partition=0)
    assert plain.flush(30) == 0
    return values


def assert_exactly_once(srv, source: str, sink: str, inputs: list[bytes]) -> None:
    assert committed_offset_retrying(srv, GROUP, source, 0) == len(inputs)
    got = read_committed(srv.bootstrap, sink, 1)
    assert sorted(got) == sorted(v.upper() for v in inputs)  # each once
    assert queue_ends(srv, sink, 1) == [len(inputs)]  # nothing aborted is in the queue


def test_the_client_killed_mid_transaction_many_times_leaves_every_input_once(
        kafka_server):
    """Three kill -9 of the loop, each with a transaction open; each new loop's
    init_transactions aborts the open one (fencing the dead producer's epoch)."""
    srv = kafka_server()
    inputs = fill(srv, "kc-in", 60)
    for nth in (1, 2, 2):
        kill_when_open(start_loop(srv, "kc-in", "kc-out"), nth)
    finish(start_loop(srv, "kc-in", "kc-out"))
    assert_exactly_once(srv, "kc-in", "kc-out", inputs)


def test_a_client_killed_mid_transaction_and_never_back_is_aborted_at_its_timeout(
        kafka_server):
    """Nobody inits the transactional id again: the server aborts the open transaction
    once transaction.timeout.ms passed; its messages and offsets never appear."""
    srv = kafka_server()
    fill(srv, "kt-in", 30)
    kill_when_open(start_loop(srv, "kt-in", "kt-out", timeout_ms=2000), 2)
    assert committed_offset(srv, GROUP, "kt-in", 0) == BATCH  # the first transaction
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "timed out after 2000 ms: aborted" not in srv.log():
        time.sleep(0.2)  # the coordinator looks once a second
    assert "timed out after 2000 ms: aborted" in srv.log()
    assert len(read_committed(srv.bootstrap, "kt-out", 1, settle=2.0)) == BATCH
    assert queue_ends(srv, "kt-out", 1) == [BATCH]
    assert committed_offset(srv, GROUP, "kt-in", 0) == BATCH


def test_the_client_and_the_server_killed_together_leave_every_input_once(kafka_server):
    """kill -9 of the loop and of the server at the same moment, a transaction open; the
    restarted server finds the transaction prepared and undecided, the restarted loop's
    init_transactions aborts it. Twice, then to the end."""
    srv = kafka_server()
    inputs = fill(srv, "kb-in", 50)
    for nth in (1, 2):
        loop = start_loop(srv, "kb-in", "kb-out")
        kill_when_open(loop, nth, server=srv)
        srv.start()
    finish(start_loop(srv, "kb-in", "kb-out"))
    assert_exactly_once(srv, "kb-in", "kb-out", inputs)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
