"""Produce's records into a real broker and Fetch's batch back out of it, through the door's
one-step codec (fmq.server.kafka.record_messages, compiled or pure): the records come back
as they were sent (key, value, headers, CreateTime), at their queue offsets, in a batch
stamped with the partition leader epoch the read carries."""

from __future__ import annotations

import struct

from kafka.record.default_records import DefaultRecordBatchBuilder

import fmq
from fmq.server.kafka.fetch import PartitionRead, _read_one
from fmq.server.kafka.record_messages import messages_of_records
from fmq.server.kafka.records import decode_batches

LIMIT = 1 << 20
RECORDS = [(None, b"v" * 300, []), (b"key", None, [("h", b"\x00\xff"), ("t", b"text")]),
           (b"", b"", [])]


def _batch() -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=LIMIT)
    for i, (key, value, headers) in enumerate(RECORDS):
        builder.append(i, timestamp=1_700_000_000_000 + 7 * i, key=key, value=value,
                       headers=headers)
    return bytes(builder.build())


def test_fetched_records_are_the_produced_ones_with_the_reads_leader_epoch(tmp_path):
    cfg = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0)
    with fmq.Broker.open(str(tmp_path / "data"), cfg) as broker:
        broker.send_batch([fmq.Message("f", b"first", queue_id=0)])
        broker.send_batch(messages_of_records(_batch(), LIMIT, "f", 0))
        assert broker.wait_indexed(30)
        read = PartitionRead("f", 0, 1, LIMIT, queue=0, leader_epoch=5)
        _read_one(broker, read, LIMIT)
    assert (read.error, read.low, read.high) == (0, 0, 4)
    base, _length, epoch = struct.unpack_from(">qii", read.records)
    assert (base, epoch) == (1, 5)
    [batch] = decode_batches(read.records, LIMIT)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in batch.records] == [
        (key or None, value, headers, 1_700_000_000_000 + 7 * i)
        for i, (key, value, headers) in enumerate(RECORDS)]
