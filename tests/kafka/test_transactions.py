"""Kafka transactions on FMQ's transactions (docs/kafka.md, *Exactly-once*), through
confluent-kafka (librdkafka): a committed transaction is visible whole to read_committed
consumers, an aborted one never, a newer producer of a transactional id fences the older
one and aborts what it left open, and the producer id and epoch survive kill -9."""

from __future__ import annotations

import datetime
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from fmq.client import Client
from fmq.errors import ConnectionLost
from fmq.protocol import Op

from .wire import exchange, request_type

#: librdkafka (2.x) re-bootstraps once every broker it knew is gone (a single server killed):
#: it decommissions them, and a transactional producer that had cached the decommissioned
#: broker as its group coordinator then waits in send_offsets_to_transaction for ever,
#: sending nothing and ignoring its time-out (librdkafka issues 5511 and 5456). Against one
#: server that restarts at the same address, re-bootstrapping gains nothing: turn it off.
NO_REBOOTSTRAP = {"metadata.recovery.strategy": "none"}


def transactional_producer(bootstrap: str, transactional_id: str, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60_000, **NO_REBOOTSTRAP, **extra})
    producer.init_transactions(30)
    return producer


def read_committed(bootstrap: str, topic: str, partitions: int, settle: float = 3.0,
                   timeout: float = 30.0) -> list[bytes]:
    """Every value of ``topic``'s partitions a read_committed consumer reads until nothing
    new came for ``settle`` seconds."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-reader",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline and time.monotonic() - quiet_since < settle:
            msg = consumer.poll(0.3)
            if msg is None or msg.error() is not None:
                continue
            got.append(msg.value())
            quiet_since = time.monotonic()
    finally:
        consumer.close()
    return got


def queue_ends(srv, topic: str, partitions: int) -> list[int]:
    with Client(srv.address) as client:
        return [client.call(Op.QUEUE_RANGE, {"topic": topic, "queue_id": q})["next_offset"]
                for q in range(partitions)]


def test_a_committed_transaction_is_visible_whole_and_an_aborted_one_never(
        shared_kafka_server):
    srv = shared_kafka_server
    producer = transactional_producer(srv.bootstrap, "txn-commit-abort")
    producer.begin_transaction()
    for i in range(10):
        producer.produce("txn-ca", value=b"aborted-%d" % i, partition=i % 2)
    producer.flush(30)
    assert queue_ends(srv, "txn-ca", 2) == [0, 0]  # prepared: in no queue yet
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce("txn-ca", value=b"committed-%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    got = read_committed(srv.bootstrap, "txn-ca", 2)
    assert sorted(got) == sorted(b"committed-%d" % i for i in range(10))
    assert queue_ends(srv, "txn-ca", 2) == [5, 5]


def test_a_newer_producer_fences_the_older_and_aborts_its_open_transaction(
        shared_kafka_server):
    srv = shared_kafka_server
    zombie = transactional_producer(srv.bootstrap, "txn-zombie")
    zombie.begin_transaction()
    zombie.produce("txn-z", value=b"zombie", partition=0)
    zombie.flush(30)
    successor = transactional_producer(srv.bootstrap, "txn-zombie")  # fences the zombie
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower()
    successor.begin_transaction()
    successor.produce("txn-z", value=b"successor", partition=0)
    successor.commit_transaction(30)
    assert read_committed(srv.bootstrap, "txn-z", 1) == [b"successor"]


def init_producer_id(srv, transactional_id: str) -> tuple[int, int]:
    _, answer = exchange(("127.0.0.1", srv.kafka_port), request_type(22, 4)(
        transactional_id=transactional_id,
        transaction_timeout=datetime.timedelta(seconds=60)))
    assert answer.error_code == 0
    return answer.producer_id, answer.producer_epoch


def test_producer_ids_and_epochs_survive_kill_9(kafka_server):
    srv = kafka_server()
    pid, epoch = init_producer_id(srv, "txn-durable")
    assert init_producer_id(srv, "txn-durable") == (pid, epoch + 1)
    srv.kill()
    srv.start()
    assert init_producer_id(srv, "txn-durable") == (pid, epoch + 2)


def committed_offset(srv, group: str, topic: str, partition: int) -> int | None:
    with Client(srv.address) as client:
        answer = client.call(Op.FETCH_OFFSET, {"group": group, "topic": topic,
                                               "queue_id": partition})
    return None if answer["offset"] < 0 else answer["offset"]


def test_offsets_sent_with_a_transaction_commit_with_it_and_not_on_abort(
        shared_kafka_server):
    srv = shared_kafka_server
    plain = Producer({"bootstrap.servers": srv.bootstrap})
    for i in range(10):
        plain.produce("txn-in", value=b"in-%d" % i, partition=0)
    assert plain.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "txn-offsets",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("txn-in", 0, 0)])
    producer = transactional_producer(srv.bootstrap, "txn-offsets")
    try:
        producer.begin_transaction()
        producer.produce("txn-out", value=b"aborted", partition=0)
        producer.send_offsets_to_transaction([TopicPartition("txn-in", 0, 7)],
                                             consumer.consumer_group_metadata(), 30)
        producer.abort_transaction(30)
        assert committed_offset(srv, "txn-offsets", "txn-in", 0) is None
        producer.begin_transaction()
        producer.produce("txn-out", value=b"committed", partition=0)
        producer.send_offsets_to_transaction([TopicPartition("txn-in", 0, 9)],
                                             consumer.consumer_group_metadata(), 30)
        assert committed_offset(srv, "txn-offsets", "txn-in", 0) is None  # not yet
        producer.commit_transaction(30)
    finally:
        consumer.close()
    assert committed_offset(srv, "txn-offsets", "txn-in", 0) == 9
    assert read_committed(srv.bootstrap, "txn-out", 1) == [b"committed"]


def test_a_transaction_nobody_ends_is_aborted_after_its_timeout(shared_kafka_server):
    srv = shared_kafka_server
    producer = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "txn-late",
                         "transaction.timeout.ms": 2000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("txn-late", value=b"late", partition=0)
    producer.flush(30)
    time.sleep(4)  # the coordinator checks once a second
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)  # the coordinator aborted it and bumped the epoch
    assert read_committed(srv.bootstrap, "txn-late", 1, settle=2.0) == []
    assert queue_ends(srv, "txn-late", 1) == [0]


def test_kill_9_mid_transaction_and_after_end_txn(kafka_server):
    """Every committed transaction whole after a SIGKILL, every open one gone (aborted by
    the next producer of its id)."""
    srv = kafka_server()
    left_open = transactional_producer(srv.bootstrap, "txn-crash-open")
    left_open.begin_transaction()
    for i in range(5):
        left_open.produce("txn-crash", value=b"open-%d" % i, partition=i % 2)
    left_open.flush(30)
    done = transactional_producer(srv.bootstrap, "txn-crash-done")
    done.begin_transaction()
    for i in range(5):
        done.produce("txn-crash", value=b"done-%d" % i, partition=i % 2)
    done.commit_transaction(30)
    srv.kill()
    srv.start()
    expected = [b"done-%d" % i for i in range(5)]
    assert sorted(read_committed(srv.bootstrap, "txn-crash", 2)) == expected
    successor = transactional_producer(srv.bootstrap, "txn-crash-open")  # aborts the open one
    successor.begin_transaction()
    successor.produce("txn-crash", value=b"successor", partition=0)
    successor.commit_transaction(30)
    assert sorted(read_committed(srv.bootstrap, "txn-crash", 2)) == sorted(
        [*expected, b"successor"])
    assert sum(queue_ends(srv, "txn-crash", 2)) == 6


def test_a_commit_decided_before_a_crash_is_carried_out_at_restart(kafka_server):
    """The crash point inside EndTxn between the durable decision and FMQ's COMMITs: the
    log holds the prepared messages and the ``prepare_commit`` record, nothing is
    visible; the restarted server commits them whole, with the offsets sent along."""
    import fmq
    from fmq.server.kafka.txn_store import PREPARE_COMMIT, load_states, write_state

    srv = kafka_server()
    plain = Producer({"bootstrap.servers": srv.bootstrap})
    for i in range(4):
        plain.produce("txn-decided-in", value=b"in-%d" % i, partition=0)
    assert plain.flush(30) == 0
    producer = transactional_producer(srv.bootstrap, "txn-decided")
    producer.begin_transaction()
    for i in range(6):
        producer.produce("txn-decided", value=b"decided-%d" % i, partition=i % 2)
    producer.flush(30)
    srv.kill()
    with fmq.Broker.open(srv.data_dir) as broker:
        state = load_states(broker)["txn-decided"]
        state.state = PREPARE_COMMIT
        state.offsets = [["txn-decided-group", "txn-decided-in", 0, 4]]
        write_state(broker, state)  # what EndTxn makes durable before any COMMIT
        assert broker.reads.queue_range("txn-decided", 0)[1] == 0
    srv.start()
    got = read_committed(srv.bootstrap, "txn-decided", 2)
    assert sorted(got) == sorted(b"decided-%d" % i for i in range(6))
    assert committed_offset(srv, "txn-decided-group", "txn-decided-in", 0) == 4


def test_aiokafka_transactions_commit_whole_and_abort_invisible(shared_kafka_server):
    """A second client's transactions (aiokafka: its own InitProducerId, AddPartitionsToTxn,
    EndTxn versions), read back with librdkafka's read_committed."""
    import asyncio

    from aiokafka import AIOKafkaProducer

    srv = shared_kafka_server

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=srv.bootstrap,
                                    transactional_id="txn-aio")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(4):
                    await producer.send_and_wait("txn-aio", b"aio-%d" % i, partition=i % 2)
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait("txn-aio", b"aio-aborted", partition=0)
                    raise RuntimeError("abort it")  # the context manager aborts
        finally:
            await producer.stop()

    asyncio.run(run())
    got = read_committed(srv.bootstrap, "txn-aio", 2)
    assert sorted(got) == sorted(b"aio-%d" % i for i in range(4))
    assert queue_ends(srv, "txn-aio", 2) == [2, 2]


def test_a_producer_numbering_afresh_after_an_abort_is_not_taken_for_its_resend(
        shared_kafka_server):
    """Two transactions of one producer and epoch whose batches carry the same sequence
    numbers: the second is new data, not a resend of the aborted first."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    srv = shared_kafka_server
    address = ("127.0.0.1", srv.kafka_port)
    pid, epoch = init_producer_id(srv, "txn-renumber")

    def batch(value: bytes) -> bytes:
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=0, is_transactional=True, producer_id=pid,
            producer_epoch=epoch, base_sequence=0, batch_size=1 << 20)
        builder.append(0, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
        return bytes(builder.build())

    def transaction(value: bytes, commit: bool) -> None:
        add = request_type(24, 3)
        module = __import__(add.__module__, fromlist=["x"])
        _, added = exchange(address, add(
            v3_and_below_transactional_id="txn-renumber", v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
                module.AddPartitionsToTxnTopic(name="txn-renumber", partitions=(0,)),)))
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0] \
            .partition_error_code == 0
        produce = request_type(0, 9)
        module = __import__(produce.__module__, fromlist=["x"])
        _, produced = exchange(address, produce(
            transactional_id="txn-renumber", acks=-1, timeout=datetime.timedelta(seconds=10),
            topic_data=(module.TopicProduceData(name="txn-renumber", partition_data=(
                module.PartitionProduceData(index=0, records=batch(value)),)),)))
        [part] = produced.responses[0].partition_responses
        assert (part.error_code, part.base_offset) == (0, -1)  # placed at COMMIT
        _, ended = exchange(address, request_type(26, 3)(
            transactional_id="txn-renumber", producer_id=pid, producer_epoch=epoch,
            committed=commit))
        assert ended.error_code == 0

    transaction(b"aborted", commit=False)
    transaction(b"committed", commit=True)
    assert read_committed(srv.bootstrap, "txn-renumber", 1) == [b"committed"]


def test_kill_9_during_end_txn_leaves_the_transaction_whole_or_gone(kafka_server):
    """SIGKILL while EndTxn commits 80 FMQ transactions (one per Produce): after the restart
    either every message is there or none, and none twice. (On the test machine the kill
    lands after the decision, and the restarted server's roll-forward finishes the
    commit: its log says "finishing its prepare_commit decided before a restart".)"""
    import threading

    srv = kafka_server()
    producer = transactional_producer(srv.bootstrap, "txn-cut-end")
    producer.begin_transaction()
    values = [b"cut-%d" % i for i in range(80)]
    for i, value in enumerate(values):
        producer.produce("txn-cut-end", value=value, partition=i % 4)
        producer.flush(30)  # one Produce request each: 80 FMQ transactions to commit
    committing = threading.Thread(target=lambda: _ignore_errors(
        lambda: producer.commit_transaction(10)), daemon=True)
    committing.start()
    time.sleep(0.02)
    srv.kill()
    srv.start()
    got = read_committed(srv.bootstrap, "txn-cut-end", 4)
    assert sorted(got) in ([], sorted(values)), f"{len(got)} of 80 messages visible"
    if not got:  # not decided before the kill: the next producer of the id aborts it
        transactional_producer(srv.bootstrap, "txn-cut-end")
        assert read_committed(srv.bootstrap, "txn-cut-end", 4, settle=2.0) == []
    committing.join(30)


def _ignore_errors(fn) -> None:
    try:
        fn()
    except KafkaException:
        pass  # the server was killed under it


@pytest.mark.timeout(600)  # three restarts and about 15 transactions, on a loaded machine
def test_consume_transform_produce_killed_with_sigkill_holds_every_input_exactly_once(
        kafka_server):
    """The server is SIGKILLed three times under a consume-transform-produce loop; the loop
    starts over from its group's committed offset after each failure (a new producer of
    the same transactional id fences the old one and aborts what it left open). Run to
    the end, the output holds every input exactly once."""
    import threading

    srv = kafka_server()
    inputs = [b"in-%03d" % i for i in range(150)]
    plain = Producer({"bootstrap.servers": srv.bootstrap})
    for value in inputs:
        plain.produce("ctp-in", value=value, partition=0)
    assert plain.flush(30) == 0
    kills = 0
    progress = {"committed": 0}  # the loop's last acknowledged commit
    killed_at: list[int] = []
    stop = threading.Event()

    def killer() -> None:
        # Each kill once the loop has committed past a third more of the input: the kills
        # land inside the work (a fixed period lost them all before the first commit on a
        # loaded machine, where a restart and init_transactions take longer than it).
        nonlocal kills
        for threshold in (30, 70, 110):
            while progress["committed"] < threshold and not stop.wait(0.01):
                pass
            if stop.is_set():
                return
            killed_at.append(progress["committed"])
            srv.kill()
            srv.start()
            kills += 1

    threading.Thread(target=killer, daemon=True).start()
    deadline = time.monotonic() + 500
    try:
        while time.monotonic() < deadline:
            committed = committed_offset_retrying(srv, "ctp", "ctp-in", 0) or 0
            if committed >= len(inputs) and kills >= 3:
                break
            try:
                transform_round(srv.bootstrap, committed, progress)
            except KafkaException:
                time.sleep(0.5)  # the server went away: start over from the committed offset
    finally:
        stop.set()
    assert kills == 3
    assert all(0 < at < len(inputs) for at in killed_at), killed_at  # kills mid-work
    assert committed_offset_retrying(srv, "ctp", "ctp-in", 0) == len(inputs)
    got = read_committed(srv.bootstrap, "ctp-out", 1)
    assert sorted(got) == sorted(v.upper() for v in inputs)  # each once


def committed_offset_retrying(srv, group: str, topic: str, partition: int) -> int | None:
    for _ in range(60):
        try:
            return committed_offset(srv, group, topic, partition)
        except (OSError, ConnectionLost):
            time.sleep(0.5)  # killed, or restarting
    raise AssertionError("the server did not come back within 30 s")


def transform_round(bootstrap: str, start: int, progress: dict) -> None:
    """Read from ``start``, write the values upper-cased with the offsets, in transactions
    of up to 10 messages, until 3 s pass with nothing new."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ctp-1",
                         "transaction.timeout.ms": 10_000, "message.timeout.ms": 10_000,
                         **NO_REBOOTSTRAP})
    try:
        producer.init_transactions(10)
        consumer.assign([TopicPartition("ctp-in", 0, start)])
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < 3:
            msgs = [m for m in consumer.consume(10, 0.5) if m.error() is None]
            if not msgs:
                continue
            idle_since = time.monotonic()
            producer.begin_transaction()
            for m in msgs:
                producer.produce("ctp-out", value=m.value().upper(), partition=0)
            producer.send_offsets_to_transaction(
                [TopicPartition("ctp-in", 0, msgs[-1].offset() + 1)],
                consumer.consumer_group_metadata(), 10)
            producer.commit_transaction(10)
            progress["committed"] = msgs[-1].offset() + 1
            time.sleep(0.05)  # so that the kills land while the work goes on
    finally:
        consumer.close()


def test_a_transactional_producer_sends_offsets_again_after_the_server_restarts(
        kafka_server):
    """The loop's hang, reduced: a producer that sent offsets once (its group coordinator
    is cached), the server killed and restarted, then a second transaction with offsets.
    With librdkafka's re-bootstrap on, send_offsets_to_transaction never returned (the
    server had answered every request it got; the client sent no FindCoordinator again);
    NO_REBOOTSTRAP keeps the broker it knows, and every call returns in time."""
    import threading

    srv = kafka_server()
    plain = Producer({"bootstrap.servers": srv.bootstrap})
    for i in range(4):
        plain.produce("txn-again-in", value=b"in-%d" % i, partition=0)
    assert plain.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "txn-again",
                         "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "txn-again",
                         "transaction.timeout.ms": 10_000, **NO_REBOOTSTRAP})
    producer.init_transactions(30)

    def transaction(value: bytes, offset: int) -> None:
        producer.begin_transaction()
        producer.produce("txn-again", value=value, partition=0)
        producer.send_offsets_to_transaction([TopicPartition("txn-again-in", 0, offset)],
                                             consumer.consumer_group_metadata(), 10)
        producer.commit_transaction(10)

    try:
        transaction(b"before", 1)
        srv.kill()
        time.sleep(1.5)  # every connection of the client fails while the server is down
        srv.start()
        outcome: dict = {}

        def again() -> None:
            try:
                transaction(b"after", 2)
                outcome["ok"] = True
            except KafkaException as exc:  # a retriable refusal is an answer too
                outcome["error"] = exc

        second = threading.Thread(target=again, daemon=True)
        second.start()
        second.join(60)
        assert not second.is_alive(), "the transactional calls did not return in 60 s"
        if "error" in outcome:  # answered, not hung: the next round does it
            transaction(b"after", 2)
    finally:
        consumer.close()
    assert committed_offset(srv, "txn-again", "txn-again-in", 0) == 2
    assert sorted(read_committed(srv.bootstrap, "txn-again", 1)) == [b"after", b"before"]


def test_a_fenced_producer_learns_it_as_its_request_version_says(shared_kafka_server):
    """PRODUCER_FENCED exists since EndTxn v2 (KIP-588): an older EndTxn (aiokafka's) is
    answered INVALID_PRODUCER_EPOCH, which such clients take for fencing; before, the door
    answered 90 at every version and aiokafka raised an unknown error instead."""
    srv = shared_kafka_server
    address = ("127.0.0.1", srv.kafka_port)
    pid, old_epoch = init_producer_id(srv, "txn-fenced-version")
    assert init_producer_id(srv, "txn-fenced-version") == (pid, old_epoch + 1)
    answers = {}
    for version in (0, 1, 2, 3):
        _, ended = exchange(address, request_type(26, version)(
            transactional_id="txn-fenced-version", producer_id=pid,
            producer_epoch=old_epoch, committed=False))
        answers[version] = ended.error_code
    invalid_epoch, fenced = 47, 90
    assert answers == {0: invalid_epoch, 1: invalid_epoch, 2: fenced, 3: fenced}


def test_a_fenced_producer_s_produce_is_answered_as_its_version_says(shared_kafka_server):
    """PRODUCER_FENCED exists since Produce v9 (KIP-588): a fenced transactional Produce of
    an older version (aiokafka's) is answered INVALID_PRODUCER_EPOCH."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    srv = shared_kafka_server
    address = ("127.0.0.1", srv.kafka_port)
    pid, old_epoch = init_producer_id(srv, "txn-fenced-produce")
    init_producer_id(srv, "txn-fenced-produce")  # fences old_epoch
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=pid,
        producer_epoch=old_epoch, base_sequence=0, batch_size=1 << 20)
    builder.append(0, timestamp=1_700_000_000_000, key=None, value=b"zombie", headers=[])
    records = bytes(builder.build())
    answers = {}
    for version in (8, 9):
        produce = request_type(0, version)
        module = __import__(produce.__module__, fromlist=["x"])
        _, produced = exchange(address, produce(
            transactional_id="txn-fenced-produce", acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(module.TopicProduceData(name="txn-fenced-produce", partition_data=(
                module.PartitionProduceData(index=0, records=records),)),)))
        answers[version] = produced.responses[0].partition_responses[0].error_code
    assert answers == {8: 47, 9: 90}  # INVALID_PRODUCER_EPOCH, PRODUCER_FENCED
