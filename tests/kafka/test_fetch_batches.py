"""Produce's records into a real broker and Fetch's batch back out of it, through the door's
one-step codec (fmq.server.kafka.record_messages, compiled or pure): the records come back
as they were sent (key, value, headers, CreateTime), at their queue offsets, in a batch
stamped with the partition leader epoch the read carries."""

from __future__ import annotations

import os
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

import fmq
from fmq.datadir import LOG_DIR
from fmq.errors import BadRecord
from fmq.server.kafka.fetch import MAX_RECORDS, PartitionRead, _read_one
from fmq.server.kafka.record_messages import batch_of_messages, messages_of_records
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


def _door_and_sdk_messages(broker) -> None:
    """Queue 0 of ``f``: messages sent through FMQ's SDK (a key, tags, properties, one with
    an escaped-looking value) and through the door (CreateTimes, a null value, headers)."""
    broker.send_batch([fmq.Message("f", b"sdk", key="k1", tags="a", queue_id=0,
                                   properties={"p": "v", "bin": "\x00AP8="}),
                       fmq.Message("f", b"", queue_id=0),
                       fmq.Message("f", b"\xff" * 2000, key="é", queue_id=0)])
    broker.send_batch(messages_of_records(_batch(), LIMIT, "f", 0))


def test_a_fetch_is_the_batch_of_what_a_pull_reads_and_counts_them(tmp_path):
    """The batch Fetch writes from the stored records is the one the door's codec makes of
    the messages FMQ's pull returns, from any offset and under any byte limit, and the
    messages are counted as read once each."""
    cfg = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0)
    with fmq.Broker.open(str(tmp_path / "data"), cfg) as broker:
        _door_and_sdk_messages(broker)
        assert broker.wait_indexed(30)
        for offset in range(6):
            for max_bytes in (1, 500, 2500, LIMIT):
                before = broker.reads.messages_out.get("f", 0)
                read = PartitionRead("f", 0, offset, max_bytes, queue=0, leader_epoch=3)
                _read_one(broker, read, LIMIT)
                fetched = broker.reads.messages_out["f"] - before
                messages = broker.reads.pull("f", 0, offset, MAX_RECORDS, max_bytes)
                assert read.records == batch_of_messages(messages, 3), (offset, max_bytes)
                assert fetched == len(messages) > 0


def test_a_damaged_record_is_fetched_as_a_pull_reads_it(tmp_path):
    """A record whose bytes changed on disk: a fetch before it gets what precedes it, a
    fetch at it fails with BadRecord (reported once, as for FMQ's consumers), a fetch past
    it reads on."""
    data = str(tmp_path / "data")
    with fmq.Broker.open(data, fmq.BrokerConfig(checkpoint_interval_ms=0)) as broker:
        for i in range(6):
            broker.send(fmq.Message("t", f"body-{i:04d}".encode(), queue_id=0))
    (segment,) = os.listdir(os.path.join(data, LOG_DIR))
    with open(os.path.join(data, LOG_DIR, segment), "r+b") as f:
        raw = f.read()
        at = raw.index(b"body-0002") + 5
        f.seek(at)
        f.write(bytes([raw[at] ^ 0x01]))
    cfg = fmq.BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0)
    with fmq.Broker.open(data, cfg) as broker:
        assert broker.wait_indexed(30)

        def fetched(offset: int) -> list[bytes | None]:
            read = PartitionRead("t", 0, offset, LIMIT, queue=0)
            _read_one(broker, read, LIMIT)
            return [r.value for b in decode_batches(read.records, LIMIT) for r in b.records]

        assert fetched(0) == [b"body-0000", b"body-0001"]
        for _ in range(2):
            with pytest.raises(BadRecord):
                fetched(2)
        assert fetched(3) == [b"body-0003", b"body-0004", b"body-0005"]
        assert (broker.reads.bad_records.records, broker.reads.bad_records.reads) == (1, 2)
