"""Kafka's idempotent producers on FMQ's dedup window: InitProducerId hands out ids, a
resent batch (same producer id, epoch and sequence) is answered with the first one's
offsets and stored once, and clients with idempotence on (their default) work."""

from __future__ import annotations

import datetime

from kafka.record.default_records import DefaultRecordBatchBuilder

from fmq.client import Client
from fmq.protocol import Op

from .test_clients import consume, produce_all
from .wire import exchange, request_type


def idempotent_batch(producer_id: int, epoch: int, base_sequence: int, values: list[bytes]
                     ) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=epoch,
                                        base_sequence=base_sequence, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce(address, topic: str, records: bytes):
    cls = request_type(0, 9)
    module = __import__(cls.__module__, fromlist=["x"])
    request = cls(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
                  topic_data=(module.TopicProduceData(name=topic, partition_data=(
                      module.PartitionProduceData(index=0, records=records),)),))
    _, answer = exchange(address, request)
    [part] = answer.responses[0].partition_responses
    return part.error_code, part.base_offset


def test_a_resent_batch_is_answered_with_its_first_offsets_and_stored_once(
        shared_kafka_server):
    srv = shared_kafka_server
    address = ("127.0.0.1", srv.kafka_port)
    _, ids = exchange(address, request_type(22, 4)(
        transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60)))
    assert ids.error_code == 0 and ids.producer_id >= 0 and ids.producer_epoch == 0
    pid = ids.producer_id
    first = idempotent_batch(pid, 0, 0, [b"a", b"b"])
    assert produce(address, "idem", first) == (0, 0)
    assert produce(address, "idem", idempotent_batch(pid, 0, 2, [b"c"])) == (0, 2)
    assert produce(address, "idem", first) == (0, 0)  # the resend: its first answer
    # A new epoch numbers from 0 again and is not taken for a resend.
    _, bumped = exchange(address, request_type(22, 4)(
        transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=pid, producer_epoch=0))
    assert (bumped.producer_id, bumped.producer_epoch) == (pid, 1)
    assert produce(address, "idem", idempotent_batch(pid, 1, 0, [b"d"])) == (0, 3)
    with Client(srv.address) as client:
        answer = client.call(Op.QUEUE_RANGE, {"topic": "idem", "queue_id": 0})
    assert answer["next_offset"] == 4
    got = consume(srv.bootstrap, "idem", 4)
    assert [m.value() for m in got] == [b"a", b"b", b"c", b"d"]
    assert all(m.headers() is None for m in got)  # FMQ's bookkeeping is not shown


def test_clients_with_idempotence_on_work(shared_kafka_server):
    from kafka import KafkaProducer

    srv = shared_kafka_server
    producer = KafkaProducer(bootstrap_servers=srv.bootstrap, acks="all")  # idempotent
    sent = [producer.send("idem-clients", value=b"kp%d" % i, partition=1).get(30)
            for i in range(3)]
    producer.close()
    assert [m.offset for m in sent] == [0, 1, 2]
    produce_all(srv.bootstrap, "idem-clients", [(None, b"ck", [])], partition=1,
                enable_idempotence=True)
    got = consume(srv.bootstrap, "idem-clients", 4, partition=1)
    assert [m.value() for m in got] == [b"kp0", b"kp1", b"kp2", b"ck"]
