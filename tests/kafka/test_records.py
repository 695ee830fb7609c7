"""The record batch v2 codec and the record mapping, against batches made by a Kafka client
library's own encoder (kafka-python's) and by hand."""

from __future__ import annotations

import struct

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from fmq.message import StoredMessage
from fmq.server.kafka.compression import XERIAL_MAGIC
from fmq.server.kafka.mapping import (
    CREATE_TIME_PROPERTY,
    NULL_VALUE_PROPERTY,
    MappingError,
    header_to_property,
    property_to_header,
    to_message,
    to_record,
)
from fmq.server.kafka.records import (
    BATCH_OVERHEAD,
    CORRUPT_MESSAGE,
    CRC_FROM,
    LENGTH_FROM,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    KafkaRecord,
    RecordError,
    decode_batches,
    encode_batch,
    read_varint,
    write_varint,
)
from tests.kafka import record_reference

LIMIT = 1 << 20
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def client_batch(codec: int, records: list[tuple[bytes | None, bytes | None, list]]) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=LIMIT)
    for i, (key, value, headers) in enumerate(records):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=key, value=value,
                       headers=headers)
    return bytes(builder.build())


def snappy_batch(records: list, xerial: bool) -> bytes:
    """kafka-python has no snappy here: its uncompressed batch, its records recompressed
    raw (as librdkafka writes them) or in xerial's framing (as the Java client does)."""
    plain = client_batch(0, records)
    head, body = plain[:BATCH_OVERHEAD], plain[BATCH_OVERHEAD:]
    packed = bytes(cramjam.snappy.compress_raw(body))
    if xerial:
        packed = XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", len(packed)) + packed
    after_crc = bytearray(head[CRC_FROM:] + packed)
    after_crc[0:2] = struct.pack(">h", 2)  # attributes: snappy
    length = len(after_crc) + CRC_FROM - LENGTH_FROM
    return (head[:8] + struct.pack(">iib", length, 0, 2) + struct.pack(">I", crc32c(after_crc))
            + bytes(after_crc))


@pytest.mark.parametrize("codec", sorted(CODECS) + ["snappy-xerial"])
def test_a_client_batch_decodes_with_every_codec(codec):
    records = [(b"k1", b"v" * 500, [("h", b"\x00\xff")]), (None, b"", []), (b"k3", None, [])]
    if codec.startswith("snappy"):
        data = snappy_batch(records, xerial=codec == "snappy-xerial")
    else:
        data = client_batch(CODECS[codec], records)
    [batch] = decode_batches(data, LIMIT)
    assert batch.attributes & 7 == CODECS[codec.split("-")[0]]
    assert [(r.key, r.value, r.headers) for r in batch.records] == records
    assert [r.timestamp for r in batch.records] == [1_700_000_000_000 + i for i in range(3)]


def test_encoded_batches_decode_back_and_keep_their_offsets():
    recs = [(0, KafkaRecord(b"a", b"1", [("x", b"y")], 1000)),
            (1, KafkaRecord(None, None, [], 1005))]
    data = encode_batch(40, recs)
    assert struct.unpack_from(">q", data)[0] == 40
    [batch] = decode_batches(data + encode_batch(42, recs[:1]), LIMIT)[:1]
    assert [(r.key, r.value, r.headers, r.timestamp) for r in batch.records] == [
        (b"a", b"1", [("x", b"y")], 1000), (None, None, [], 1005)]


def test_a_flipped_bit_fails_the_crc():
    data = bytearray(client_batch(0, [(b"k", b"value", [])]))
    data[-2] ^= 0x01
    with pytest.raises(RecordError, match="CRC-32C") as caught:
        decode_batches(bytes(data), LIMIT)
    assert caught.value.code == CORRUPT_MESSAGE


def test_truncated_and_old_format_batches_are_refused():
    data = client_batch(0, [(b"k", b"value", [])])
    with pytest.raises(RecordError) as caught:
        decode_batches(data[:-3], LIMIT)
    assert caught.value.code == CORRUPT_MESSAGE
    old = bytearray(data)
    old[16] = 1  # magic
    with pytest.raises(RecordError) as caught:
        decode_batches(bytes(old), LIMIT)
    assert caught.value.code == UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_a_compressed_batch_may_not_expand_past_the_limit():
    data = client_batch(1, [(None, b"\0" * 200_000, [])])
    with pytest.raises(RecordError, match="decompresses past"):
        decode_batches(data, 10_000)


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 2**31 - 1, -2**31, 2**62, -2**63])
def test_varints_round_trip(value):
    out = bytearray()
    write_varint(out, value)
    assert read_varint(bytes(out), 0) == (value, len(out))


@pytest.mark.parametrize("value", [b"text", b"", "çé".encode(), b"\xff\xfe", b"\x00abc", None,
                                   b"\x00"])
def test_header_values_survive_as_properties_byte_for_byte(value):
    assert property_to_header(header_to_property(value)) == value


def test_text_headers_are_plain_properties_for_fmq_consumers():
    assert header_to_property(b"hello") == "hello"


def test_records_map_to_messages_and_back():
    record = KafkaRecord(b"order-1", None, [("a", b"1"), ("b", b"\x80")], 5)
    msg = to_message("t", 2, record)
    assert (msg.topic, msg.queue_id, msg.key, msg.body) == ("t", 2, "order-1", b"")
    assert msg.properties[NULL_VALUE_PROPERTY] == "1"
    stored = StoredMessage("t", 2, 7, 100, msg.body, msg.key, None, msg.properties, 99)
    back = to_record(stored)
    # The producer's CreateTime (5) comes back, not the store time (99).
    assert (back.key, back.value, back.headers, back.timestamp) == (
        b"order-1", None, [("a", b"1"), ("b", b"\x80")], 5)
    sent_by_fmq = StoredMessage("t", 2, 8, 101, b"v", None, None, {"a": "1"}, 99)
    assert to_record(sent_by_fmq).timestamp == 99


def test_records_fmq_cannot_store_as_they_are_are_refused():
    with pytest.raises(MappingError, match="not UTF-8"):
        to_message("t", 0, KafkaRecord(b"\xff", b"v"))
    with pytest.raises(MappingError, match="twice"):
        to_message("t", 0, KafkaRecord(None, b"v", [("h", b"1"), ("h", b"2")]))
    with pytest.raises(MappingError, match="keeps for itself"):
        to_message("t", 0, KafkaRecord(None, b"v", [(CREATE_TIME_PROPERTY, b"1")]))


# ---------------------------------------------------------------- the fast codec = reference

_bytes_or_none = st.one_of(st.none(), st.binary(max_size=20_000))
_record = st.tuples(_bytes_or_none, _bytes_or_none,
                    st.lists(st.tuples(st.text(max_size=8), _bytes_or_none), max_size=3))


def _summary(batches: list) -> list:
    return [(b.producer_id, b.producer_epoch, b.base_sequence, b.attributes,
             [(r.key, r.value, r.headers, r.timestamp) for r in b.records]) for b in batches]


def _decode_both(data: bytes):
    """(fast result or error code, reference result or error code)."""
    out = []
    for decode in (decode_batches, record_reference.decode_batches):
        try:
            out.append(_summary(decode(data, LIMIT)))
        except RecordError as exc:
            out.append(exc.code)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(_record, min_size=1, max_size=6))
def test_the_fast_decoder_equals_the_reference_on_client_batches(records):
    data = client_batch(0, records)
    fast, reference = _decode_both(data)
    assert fast == reference
    assert [r[:2] for r in fast[0][4]] == [r[:2] for r in records]


@settings(max_examples=300, deadline=None)
@given(st.lists(_record, min_size=1, max_size=3), st.data())
def test_the_fast_decoder_equals_the_reference_on_damaged_records(records, data):
    """Bytes of the records changed and the CRC made right again: both decoders refuse the
    batch with the same code, or both read the same records."""
    batch = bytearray(client_batch(0, records))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(BATCH_OVERHEAD, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):  # a record count that lies
        struct.pack_into(">i", batch, BATCH_OVERHEAD - 4, data.draw(st.integers(-2, 8)))
    struct.pack_into(">I", batch, CRC_FROM - 4, crc32c(bytes(batch[CRC_FROM:])))
    fast, reference = _decode_both(bytes(batch))
    assert fast == reference


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), _record, st.integers(0, 2**41)), min_size=1,
                max_size=6))
def test_the_fast_encoder_equals_the_reference(rows):
    recs, delta = [], 0
    for gap, (key, value, headers), ts in rows:
        delta += gap
        recs.append((delta, KafkaRecord(key, value, headers, ts)))
    assert encode_batch(7, recs) == record_reference.encode_batch(7, recs)
