"""Kafka transactions through a fail-over of a three-node group in ``sync`` mode
(docs/kafka.md, *Exactly-once*): the primary SIGKILLed inside EndTxn (its decision
replicated, its COMMITs written: EndTxn makes them and the offsets durable with one fsync,
so they are all visible at once) and with a transaction open. The promoted node
finishes the decided transaction and times out the open one by itself, at its promotion:
no Kafka client asks it anything first."""

from __future__ import annotations

import datetime
import threading
import time

from fmq.message import Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire
from tests.cluster.kit import call, queue_range

from .test_replication import KafkaFailoverGroup
from .wire import exchange, request_type

SOURCE = "fo-in"
DECIDED = 200


def init_producer_id(node, transactional_id: str, timeout_ms: int) -> tuple[int, int]:
    _, answer = exchange(("127.0.0.1", node.kafka_port), request_type(22, 4)(
        transactional_id=transactional_id,
        transaction_timeout=datetime.timedelta(milliseconds=timeout_ms)))
    assert answer.error_code == 0
    return answer.producer_id, answer.producer_epoch


def open_transaction(node, transactional_id: str, topic: str, values: list[bytes],
                     timeout_ms: int = 60_000) -> tuple[int, int]:
    """A transaction of ``transactional_id`` holding ``values`` (one Produce each) in
    ``topic``'s partition 0, open on ``node``: its producer id and epoch."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    address = ("127.0.0.1", node.kafka_port)
    pid, epoch = init_producer_id(node, transactional_id, timeout_ms)
    add = request_type(24, 3)
    module = __import__(add.__module__, fromlist=["x"])
    _, added = exchange(address, add(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
            module.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),)))
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0] \
        .partition_error_code == 0
    produce = request_type(0, 9)
    module = __import__(produce.__module__, fromlist=["x"])
    for sequence, value in enumerate(values):
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=0, is_transactional=True, producer_id=pid,
            producer_epoch=epoch, base_sequence=sequence, batch_size=1 << 20)
        builder.append(0, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
        _, produced = exchange(address, produce(
            transactional_id=transactional_id, acks=-1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(module.TopicProduceData(name=topic, partition_data=(
                module.PartitionProduceData(index=0, records=bytes(builder.build())),)),)))
        [part] = produced.responses[0].partition_responses
        assert part.error_code == 0, part
    return pid, epoch


def commit_offset_with(node, transactional_id: str, pid: int, epoch: int, group: str,
                       topic: str, offset: int) -> None:
    """TxnOffsetCommit: ``offset`` of ``topic``'s partition 0 commits with the transaction."""
    request = request_type(28, 3)
    module = __import__(request.__module__, fromlist=["x"])
    _, answer = exchange(("127.0.0.1", node.kafka_port), request(
        transactional_id=transactional_id, group_id=group, producer_id=pid,
        producer_epoch=epoch, generation_id=-1, member_id="", group_instance_id=None,
        topics=(module.TxnOffsetCommitRequestTopic(name=topic, partitions=(
            module.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata=""),)),)))
    assert answer.topics[0].partitions[0].error_code == 0


def end_transaction(node, transactional_id: str, pid: int, epoch: int) -> None:
    """EndTxn(commit); the answer does not matter (the node is killed under it)."""
    try:
        exchange(("127.0.0.1", node.kafka_port), request_type(26, 3)(
            transactional_id=transactional_id, producer_id=pid, producer_epoch=epoch,
            committed=True))
    except (OSError, EOFError, ValueError):
        pass


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def committed_offset(node, group: str, topic: str) -> int | None:
    try:
        answer = call(node, Op.FETCH_OFFSET, {"group": group, "topic": topic, "queue_id": 0})
    except Exception:  # noqa: BLE001 - not serving yet: asked again
        return None
    return None if answer["offset"] < 0 else answer["offset"]


def ends(node, topic: str) -> int:
    try:
        return queue_range(node, topic, 0)[1]
    except Exception:  # noqa: BLE001 - not serving yet
        return -1


#: fo-open's transaction.timeout.ms: long enough to outlast the steps between its opening
#: and the primary's kill on a loaded machine, short for the new primary's sweep.
OPEN_TIMEOUT_MS = 8000


def test_a_new_primary_finishes_a_decided_transaction_and_times_out_an_open_one(tmp_path):
    group = KafkaFailoverGroup(str(tmp_path)).start()
    try:
        primary = group.wait_whole()
        call(primary, Op.SEND, {"message": message_to_wire(Message(SOURCE, b"in",
                                                                    queue_id=0))})
        # Many Produce requests: EndTxn writes one COMMIT each, after its decision, all made
        # durable (and replicated) together; the primary is killed once they show,
        # before EndTxn's last record (the state `empty`) as a rule.
        decided = [b"decided-%03d" % i for i in range(DECIDED)]
        pid, epoch = open_transaction(primary, "fo-decided", "fo-decided", decided)
        commit_offset_with(primary, "fo-decided", pid, epoch, "fo-group", SOURCE, 1)
        # Open, with a time-out nobody ends, as late as can be before the kill: under load
        # (CI) a 3 s time-out opened before fo-decided's Produce requests ran out on the
        # old primary already, and the new one had nothing left to time out.
        open_pid, _ = open_transaction(primary, "fo-open", "fo-open",
                                       [b"open-%d" % i for i in range(3)],
                                       timeout_ms=OPEN_TIMEOUT_MS)
        group.wait_same_end()
        assert ends(primary, "fo-decided") == 0  # prepared: in no queue yet
        ending = threading.Thread(target=end_transaction,
                                  args=(primary, "fo-decided", pid, epoch), daemon=True)
        ending.start()
        visible = 0
        deadline = time.monotonic() + 60
        while visible == 0 and time.monotonic() < deadline:
            visible = ends(primary, "fo-decided")
        primary.kill()  # SIGKILL, inside EndTxn
        ending.join(30)
        assert visible > 0, f"none of {DECIDED} committed within 60 s"
        survivor = group.wait_primary(among=group.others(primary), timeout=60)
        # No Kafka request reaches the new primary: it finishes by itself.
        wait_for(lambda: ends(survivor, "fo-decided") == len(decided), 60,
                 "the decided transaction committed on the new primary")
        wait_for(lambda: committed_offset(survivor, "fo-group", SOURCE) == 1, 30,
                 "the offsets sent with it")
        timed_out = f"timed out after {OPEN_TIMEOUT_MS} ms"
        if "'fo-open'" in primary.log() and timed_out in primary.log():
            # A machine slow enough that the old primary aborted it before its kill: the
            # new one must hold nothing of it open.
            print("fo-open timed out on the old primary, before its kill")
        else:
            wait_for(lambda: "'fo-open'" in survivor.log() and timed_out in survivor.log(),
                     60, "the open transaction timed out on the new primary")
        wait_for(lambda: not [t for t in call(survivor, Op.LIST_TX, {})["transactions"]
                              if t["tx_id"].startswith(f"{open_pid}.")], 30,
                 "no FMQ transaction of fo-open left open on the new primary")
        assert ends(survivor, "fo-open") == 0
    except AssertionError:
        print(group.logs())
        raise
    finally:
        group.kill()
