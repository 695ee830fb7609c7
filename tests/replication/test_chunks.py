"""Chunks cut from a real broker's flushed log, and the follower's check of them."""

from __future__ import annotations

import pytest

from fmq import Broker
from fmq.config import BrokerConfig
from fmq.errors import BadRecord, ReplicaDiverged
from fmq.log.record import RecordType
from fmq.message import Message
from fmq.replication.chunks import read_chunk, verify_chunk

CONFIG = BrokerConfig(segment_size=16 * 1024, max_message_size=4096)


@pytest.fixture
def broker(tmp_path):
    with Broker.open(str(tmp_path / "d"), CONFIG) as b:
        b.send_batch([Message("t", bytes([i]) * 500) for i in range(100)])  # ~4 segments
        yield b


def test_chunks_are_whole_records_ending_at_a_filler(broker):
    log = broker._log
    offset, seen = 0, []
    while offset < log.flushed_offset:
        chunk = read_chunk(log, offset, 3000)
        records = verify_chunk(chunk.data, offset, chunk.segment_base, chunk.segment_size,
                               chunk.segment_size)
        assert records and sum(r.size for r in records) == len(chunk.data)
        assert len(chunk.data) <= 3000 or len(records) == 1
        seen += records
        offset += len(chunk.data)
        if records[-1].type == RecordType.FILLER:
            offset = chunk.segment_base + chunk.segment_size
    assert sum(r.type == RecordType.MESSAGE for r in seen) == 100
    assert sum(r.type == RecordType.FILLER for r in seen) == len(log.segments) - 1
    assert read_chunk(log, log.flushed_offset, 3000).data == b""  # nothing new yet


def test_a_flipped_bit_or_a_shifted_chunk_is_refused(broker):
    chunk = read_chunk(broker._log, 0, 3000)
    flipped = bytearray(chunk.data)
    flipped[len(flipped) // 2] ^= 1
    with pytest.raises(BadRecord):
        verify_chunk(bytes(flipped), 0, 0, chunk.segment_size, chunk.segment_size)
    with pytest.raises(BadRecord, match="claims log offset"):  # the same bytes elsewhere
        verify_chunk(chunk.data, 64, 0, chunk.segment_size, chunk.segment_size)


def test_a_follower_past_the_end_or_inside_a_record_has_diverged(broker):
    log = broker._log
    with pytest.raises(ReplicaDiverged):
        read_chunk(log, log.flushed_offset + 100, 3000)
    with pytest.raises(ReplicaDiverged):
        read_chunk(log, 10, 3000)  # not a record start
