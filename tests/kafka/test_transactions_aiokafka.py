"""Kafka transactions through a second client library, aiokafka (its own InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn versions and its own
transaction manager), against the Kafka door (docs/kafka.md, *Exactly-once*): an aborted
transaction is invisible to read_committed, a committed one visible whole with the offsets
sent along, a second producer of a transactional id fences the first, and a
consume-transform-produce loop SIGKILLed a few times with a transaction open, then run to
the end, leaves every input in the output exactly once.

Run as a script, this module is the loop itself (``main``)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.structs import TopicPartition

from .test_transactions import (
    committed_offset,
    committed_offset_retrying,
    queue_ends,
    read_committed,
)
from .test_transactions_kills import fill, finish, kill_when_open

GROUP = "aio-loop"
BATCH = 10


async def _started_producer(bootstrap: str, transactional_id: str,
                            timeout_ms: int = 60_000) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                                transaction_timeout_ms=timeout_ms)
    await producer.start()  # InitProducerId: the id's producer id, epoch + 1
    return producer


def test_an_aborted_transaction_is_invisible_and_a_committed_one_whole_with_its_offsets(
        shared_kafka_server):
    srv = shared_kafka_server
    fill(srv, "aio-ca-in", 5)

    async def run() -> None:
        producer = await _started_producer(srv.bootstrap, "aio-ca")
        try:
            await producer.begin_transaction()
            for i in range(6):
                await producer.send("aio-ca", b"aborted-%d" % i, partition=i % 2)
            await producer.flush()
            await producer.send_offsets_to_transaction(
                {TopicPartition("aio-ca-in", 0): 3}, "aio-ca-group")
            assert queue_ends(srv, "aio-ca", 2) == [0, 0]  # prepared: in no queue yet
            await producer.abort_transaction()
            async with producer.transaction():
                for i in range(6):
                    await producer.send("aio-ca", b"committed-%d" % i, partition=i % 2)
                await producer.send_offsets_to_transaction(
                    {TopicPartition("aio-ca-in", 0): 5}, "aio-ca-group")
        finally:
            await producer.stop()

    asyncio.run(run())
    got = read_committed(srv.bootstrap, "aio-ca", 2)
    assert sorted(got) == sorted(b"committed-%d" % i for i in range(6))
    assert queue_ends(srv, "aio-ca", 2) == [3, 3]  # nothing of the aborted one is stored
    assert committed_offset(srv, "aio-ca-group", "aio-ca-in", 0) == 5  # the committed one's


def test_a_second_producer_of_the_id_fences_the_first(shared_kafka_server):
    srv = shared_kafka_server

    async def run() -> None:
        zombie = await _started_producer(srv.bootstrap, "aio-zombie")
        successor = None
        try:
            await zombie.begin_transaction()
            await zombie.send_and_wait("aio-z", b"zombie", partition=0)
            successor = await _started_producer(srv.bootstrap, "aio-zombie")  # fences it
            with pytest.raises(ProducerFenced):
                await zombie.commit_transaction()
            async with successor.transaction():
                await successor.send_and_wait("aio-z", b"successor", partition=0)
        finally:
            await zombie.stop()
            if successor is not None:
                await successor.stop()

    asyncio.run(run())
    assert read_committed(srv.bootstrap, "aio-z", 1) == [b"successor"]
    assert queue_ends(srv, "aio-z", 1) == [1]  # the zombie's was aborted, never stored


async def _loop(bootstrap: str, source: str, sink: str, transactional_id: str) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP,
                                enable_auto_commit=False, isolation_level="read_committed",
                                auto_offset_reset="earliest")
    producer = await _started_producer(bootstrap, transactional_id)
    await consumer.start()
    try:
        partition = TopicPartition(source, 0)
        consumer.assign([partition])  # from the group's committed offset, or the earliest
        idle_since = time.monotonic()
        opened = 0
        while time.monotonic() - idle_since < 3:
            fetched = await consumer.getmany(partition, timeout_ms=500, max_records=BATCH)
            msgs = fetched.get(partition, [])
            if not msgs:
                continue
            idle_since = time.monotonic()
            await producer.begin_transaction()
            for m in msgs:
                await producer.send(sink, m.value.upper(), partition=0)
            await producer.flush()  # the Produce requests are answered: prepared
            await producer.send_offsets_to_transaction({partition: msgs[-1].offset + 1},
                                                       GROUP)
            opened += 1
            print(f"open {opened}", flush=True)
            await asyncio.sleep(0.3)  # so that a kill lands inside the transaction
            await producer.commit_transaction()
    finally:
        await consumer.stop()
        await producer.stop()


def main(bootstrap: str, source: str, sink: str, transactional_id: str) -> None:
    """The loop: from the group's committed offset, transactions of up to BATCH messages
    (values upper-cased, with the offsets), until 3 s pass with nothing new; prints
    ``open N`` once a transaction's messages and offsets are sent, before it ends."""
    asyncio.run(_loop(bootstrap, source, sink, transactional_id))


def start_loop(srv, source: str, sink: str) -> subprocess.Popen:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.kafka.test_transactions_aiokafka", srv.bootstrap,
         source, sink, "aio-loop-1"],
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


@pytest.mark.timeout(600)
def test_the_loop_killed_mid_transaction_a_few_times_leaves_every_input_once(kafka_server):
    """Three SIGKILLs of the aiokafka loop, each with a transaction open (its messages
    prepared, its offsets sent); each new loop's InitProducerId fences the dead producer
    and aborts what it left open; run to the end, the output holds every input once."""
    srv = kafka_server()
    inputs = fill(srv, "aio-k-in", 60)
    for nth in (1, 2, 2):
        kill_when_open(start_loop(srv, "aio-k-in", "aio-k-out"), nth)
    finish(start_loop(srv, "aio-k-in", "aio-k-out"))
    assert committed_offset_retrying(srv, GROUP, "aio-k-in", 0) == len(inputs)
    got = read_committed(srv.bootstrap, "aio-k-out", 1)
    assert sorted(got) == sorted(v.upper() for v in inputs)  # each once
    assert queue_ends(srv, "aio-k-out", 1) == [len(inputs)]  # nothing aborted is stored


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])
    except KafkaError as exc:
        sys.exit(f"the loop failed: {exc!r}")
