"""Crash points inside a Kafka EndTxn commit (docs/kafka.md, *Exactly-once*), enumerated as
tests/faults/test_fault03_crash_points.py does for FMQ's own commit: the server (the real
one, with the crash harness's file I/O: tests/workloads/crashing_kafka_server.py) is
SIGKILLed before, or right after, the N-th write or fsync from the moment EndTxn decides
to commit, for N = 1, 2, ... until EndTxn completes: the one write holding the decision
record, the FMQ COMMITs of the transaction's three queues and the offsets' record, and
its one fsync (the decision waits for no fsync of its own: the log is durable as a
prefix, so no COMMIT survives without it; the final state ``empty`` waits for none
either: a later write takes it along, and a kill loses it, leaving the decision to roll
forward). Inside that one write, the kill also lands between any two of its records (the
decision and the first COMMIT, the COMMITs of two queues, the offsets' record: the page
cache keeps the first R records). Then EIO injected at the N-th operation (the log fails,
the server lives on until it is killed).

After each, a normal server restarts on the data directory and the client does what a
Kafka client does after a lost EndTxn: InitProducerId again with its transactional id. A
read_committed consumer then sees either all of the transaction's messages and the
group's offset, or none of them and no offset; once a crash point shows them all (the
decision was durable) every later point does too, and a crash before the decision's
first write shows none (the next producer aborts it, as Kafka's rules say).
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess

import pytest

from tests.server.harness import free_port, start_workload_server

from .conftest import KafkaServer
from .test_transactions import committed_offset, queue_ends, read_committed
from .wire import exchange, request_type

SOURCE, SINK, GROUP, TXN_ID = "cp-in", "cp-out", "cp-group", "cp-txn"
PARTITIONS = (0, 1, 2)  # three queues: three FMQ transactions, three COMMITs
PER_PARTITION = 2
SOURCE_COUNT = 5
#: Bounds the enumeration (an EndTxn of three queues takes about a dozen operations).
MAX_POINTS = 40


def start_crashing(data_dir: str, log_path: str, arm: dict) -> tuple[subprocess.Popen, int]:
    port, kafka_port = free_port(), free_port()
    proc = start_workload_server("crashing_kafka_server", [
        data_dir, str(port), str(kafka_port), json.dumps({"arm": arm})],
        f"127.0.0.1:{port}", log_path)
    return proc, kafka_port


def init_producer(address: tuple[str, int]) -> tuple[int, int]:
    _, answer = exchange(address, request_type(22, 4)(
        transactional_id=TXN_ID, transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=-1, producer_epoch=-1))
    assert answer.error_code == 0, answer
    return answer.producer_id, answer.producer_epoch


def open_transaction(address: tuple[str, int]) -> tuple[int, int, list[bytes]]:
    """A transaction of two messages in each of three partitions (one Produce each) with
    the group's offset sent along, left open; returns (producer id, epoch, values)."""
    pid, epoch = init_producer(address)
    add = request_type(24, 3)
    entities = __import__(add.__module__, fromlist=["x"])
    _, added = exchange(address, add(
        v3_and_below_transactional_id=TXN_ID, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
            entities.AddPartitionsToTxnTopic(name=SINK, partitions=PARTITIONS),)))
    assert all(p.partition_error_code == 0
               for p in added.results_by_topic_v3_and_below[0].results_by_partition)
    values = []
    for partition in PARTITIONS:
        mine = [b"cp-%d-%d" % (partition, i) for i in range(PER_PARTITION)]
        values += mine
        produce(address, SINK, partition, mine, transactional=(pid, epoch))
    _, offsets_added = exchange(address, request_type(25, 3)(
        transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, group_id=GROUP))
    assert offsets_added.error_code == 0
    commit = request_type(28, 3)
    entities = __import__(commit.__module__, fromlist=["x"])
    _, committed = exchange(address, commit(
        transactional_id=TXN_ID, group_id=GROUP, producer_id=pid, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None, topics=(
            entities.TxnOffsetCommitRequestTopic(name=SOURCE, partitions=(
                entities.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=SOURCE_COUNT,
                    committed_leader_epoch=-1, committed_metadata=""),)),)))
    assert committed.topics[0].partitions[0].error_code == 0
    return pid, epoch, values


def end_txn(address: tuple[str, int], pid: int, epoch: int) -> int | None:
    """EndTxn(commit); its error code, or None when the server died under it."""
    try:
        _, ended = exchange(address, request_type(26, 3)(
            transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, committed=True))
    except (ConnectionError, OSError):
        return None
    return ended.error_code


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> str:
    """A data directory holding the source topic's messages (the offsets sent with the
    transaction point into them) and the sink topic; each crash point starts from a copy."""
    data_dir = str(tmp_path_factory.mktemp("filled") / "data")
    srv = KafkaServer(data_dir).start()
    try:
        address = ("127.0.0.1", srv.kafka_port)
        produce(address, SOURCE, 0, [b"in-%d" % i for i in range(SOURCE_COUNT)])
        produce(address, SINK, 3, [b"sink-made"])  # the sink exists, with four queues
    finally:
        srv.stop()
    return data_dir


def produce(address: tuple[str, int], topic: str, partition: int, values: list[bytes],
            transactional: tuple[int, int] | None = None) -> None:
    """One Produce (acks=all) of ``values``; ``transactional``: (producer id, epoch)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    pid, epoch = transactional or (-1, -1)
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=transactional is not None,
        producer_id=pid, producer_epoch=epoch, base_sequence=0 if transactional else -1,
        batch_size=1 << 20)
    for value in values:
        builder.append(0, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    request = request_type(0, 9)
    entities = __import__(request.__module__, fromlist=["x"])
    _, produced = exchange(address, request(
        transactional_id=TXN_ID if transactional else None, acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(entities.TopicProduceData(name=topic, partition_data=(
            entities.PartitionProduceData(index=partition, records=bytes(builder.build())),
        )),)))
    assert produced.responses[0].partition_responses[0].error_code == 0, produced


def crash_point(tmp_path, filled: str, n: int, mode: str, records: int = 0
                ) -> tuple[str, int | None] | None:
    """EndTxn against a server armed at operation ``n`` (``mode``); then restart and
    re-init. Returns ("all" or "none", EndTxn's answer (None: no answer)), or None when
    EndTxn completed with the server untouched (``n`` is past the last operation)."""
    place = tmp_path / f"{mode}-{n}-{records}"
    place.mkdir()
    data_dir = str(place / "data")
    shutil.copytree(filled, data_dir)
    log_path = str(place / "crashing.log")
    arm = ({"op": "pwrite", "nth": n, "mode": mode, "records": records}
           if mode == "records" else {"op": "any", "nth": n, "mode": mode})
    proc, kafka_port = start_crashing(data_dir, log_path, arm)
    try:
        pid, epoch, values = open_transaction(("127.0.0.1", kafka_port))
        answer = end_txn(("127.0.0.1", kafka_port), pid, epoch)
        if mode == "eio" or answer == 0:
            proc.kill()  # the failed log's server, or an untouched one: SIGKILL it too
        assert proc.wait(30) == -9, open(log_path).read()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    if answer == 0:  # EndTxn completed: ``n`` is past its last operation
        return None
    if mode == "eio":  # the failed log refuses, the server answers
        assert answer is not None, open(log_path).read()[-3000:]
    srv = KafkaServer(data_dir).start()
    try:
        init_producer(("127.0.0.1", srv.kafka_port))  # the client's re-init (Kafka's rule)
        got = read_committed(srv.bootstrap, SINK, 3, settle=1.0)
        stored = queue_ends(srv, SINK, 3)
        offset = committed_offset(srv, GROUP, SOURCE, 0)
    finally:
        srv.kill()
    if sorted(got) == sorted(values):
        assert (stored, offset) == ([PER_PARTITION] * 3, SOURCE_COUNT), (n, mode)
        return "all", answer
    assert (got, stored, offset) == ([], [0, 0, 0], None), \
        f"crash point {n} ({mode}): part of the transaction: {got}, {stored}, {offset}"
    return "none", answer


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("mode", ["before", "after", "eio"])
def test_every_crash_point_inside_end_txn_leaves_the_transaction_whole_or_gone(
        tmp_path, filled, mode):
    outcomes = []
    for n in range(1, MAX_POINTS + 1):
        outcome = crash_point(tmp_path, filled, n, mode)
        if outcome is None:
            break
        outcomes.append(outcome[0])
    else:
        raise AssertionError(f"EndTxn still crashed at operation {MAX_POINTS}")
    print(f"EndTxn crash points ({mode}): {outcomes}")
    # the decision, the COMMITs and the offsets: written together, then fsync'd
    assert len(outcomes) >= 2, outcomes
    if mode != "after":
        assert outcomes[0] == "none"  # before the decision's first byte: aborted at re-init
    assert "all" in outcomes
    first_all = outcomes.index("all")
    assert outcomes[first_all:] == ["all"] * (len(outcomes) - first_all), outcomes


#: The records of EndTxn's one write: the decision (the id's state record), a TX record
#: per message, a COMMIT per queue, the offsets' OFFSET record.
ONE_WRITE = 1 + len(PARTITIONS) * PER_PARTITION + len(PARTITIONS) + 1


@pytest.mark.timeout(1200)
def test_a_kill_inside_end_txn_s_one_write_leaves_the_transaction_whole_or_gone(
        tmp_path, filled):
    """EndTxn's one write cut after each of its records: without its first record (the
    decision) nothing of the transaction's end is stored and the restarted server's
    re-init aborts it; with the decision, the restarted server rolls the commit forward,
    wherever among the COMMITs and the offsets the cut lies."""
    outcomes = [crash_point(tmp_path, filled, 1, "records", cut)
                for cut in range(ONE_WRITE + 1)]
    print(f"EndTxn cut inside its one write: {outcomes}")
    assert [o[0] if o is not None else None for o in outcomes] == \
        ["none"] + ["all"] * ONE_WRITE
