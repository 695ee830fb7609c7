"""The record codec: golden bytes, round trips, and hostile input."""

from __future__ import annotations

import struct

import crcmod.predefined
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fmq.errors import BadRecord, FMQError, IncompleteRecord
from fmq.log.record import (
    HEADER_SIZE,
    Record,
    RecordType,
    decode,
    decode_properties,
    encode,
    encode_into,
    encode_properties,
    filler,
)

# A MESSAGE at log offset 4096, field by field (docs/format.md has the same example).
GOLDEN_MESSAGE = bytes.fromhex(
    "62000000"  # length 98
    "3f4eee3b"  # CRC-32C of bytes [8, 98)
    "f0f1" "01" "01"  # magic, version 1, type MESSAGE
    "0010000000000000"  # log offset 4096
    "0068e5cf8b010000"  # store time 1700000000000
    "02000000"  # queue id 2
    "0700000000000000"  # queue offset 7
    "ffffffffffffffff"  # ref offset -1
    "00000000"  # ref size 0
    "0600" "0000" "0000" "0300" "0400" "0000"  # topic 6, tx 0, group 0, key 3, tags 4, flags
    "08000000" "05000000"  # props 8, body 5
    + b"orders".hex() + b"o-1".hex() + b"paid".hex()
    + "0100" "0100" "61" "0100" "62"  # 1 property: "a" -> "b"
    + b"hello".hex()
)


def golden_record() -> Record:
    return Record(RecordType.MESSAGE, log_offset=4096, store_time=1_700_000_000_000,
                  queue_id=2, queue_offset=7, topic="orders", key="o-1", tags="paid",
                  properties={"a": "b"}, body=b"hello")


def test_golden_bytes_of_a_message():
    assert encode(golden_record()) == GOLDEN_MESSAGE


def test_encode_into_writes_the_golden_bytes_at_an_offset_and_grows_the_buffer():
    buf = bytearray(b"x" * 10)
    assert encode_into(buf, 10, golden_record()) == len(GOLDEN_MESSAGE)
    assert bytes(buf) == b"x" * 10 + GOLDEN_MESSAGE
    buf = bytearray(200)  # long enough already: written in place, nothing added
    encode_into(buf, 50, golden_record())
    assert len(buf) == 200 and bytes(buf[50 : 50 + len(GOLDEN_MESSAGE)]) == GOLDEN_MESSAGE


def test_golden_crc_matches_crcmod_reference():
    (crc,) = struct.unpack_from("<I", GOLDEN_MESSAGE, 4)
    reference = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
    assert crc == reference(GOLDEN_MESSAGE[8:])


def test_golden_decodes_field_by_field():
    r = decode(GOLDEN_MESSAGE, 0, base_offset=4096)
    assert (r.type, r.log_offset, r.store_time, r.queue_id, r.queue_offset) == (
        RecordType.MESSAGE, 4096, 1_700_000_000_000, 2, 7)
    assert (r.topic, r.key, r.tags, r.properties, r.body, r.size) == (
        "orders", "o-1", "paid", {"a": "b"}, b"hello", 98)


def _all_types() -> list[Record]:
    return [
        Record(RecordType.MESSAGE, topic="t", queue_id=0, queue_offset=0, body=b"x"),
        Record(RecordType.PREPARE, tx_id="tx-1", producer_group="g"),
        Record(RecordType.PRE_MESSAGE, tx_id="tx-1", producer_group="g", topic="t",
               queue_id=3, key="k", tags="a", properties={"p": "q"}, body=b"body" * 10),
        Record(RecordType.REF_MESSAGE, tx_id="tx-1", topic="t", queue_id=3, queue_offset=9,
               ref_offset=100, ref_size=150, key="k", tags="a"),
        Record(RecordType.TX_MESSAGE, tx_id="tx-1", topic="t", queue_id=3, queue_offset=10,
               ref_offset=100, ref_size=150, properties={"p": "q"}, body=b"copy"),
        Record(RecordType.COMMIT, tx_id="tx-1", producer_group="g", ref_offset=0),
        Record(RecordType.ROLLBACK, tx_id="tx-2", producer_group="g", ref_offset=50),
        Record(RecordType.FILLER),
    ]


@pytest.mark.parametrize("record", _all_types(), ids=lambda r: RecordType(r.type).name)
def test_round_trip_of_every_type(record):
    record.log_offset = 8192
    record.store_time = 123
    data = encode(record)
    back = decode(data, 0, base_offset=8192)
    for field in Record.__slots__:
        assert getattr(back, field) == getattr(record, field), field
    assert back.size == len(data)


def test_filler_is_a_bare_header():
    assert len(filler(64)) == HEADER_SIZE
    assert decode(filler(64), 0, base_offset=64).type == RecordType.FILLER


@given(
    topic=st.text(min_size=1, max_size=40),
    key=st.one_of(st.none(), st.text(min_size=1, max_size=40)),
    props=st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=5),
    body=st.binary(max_size=2000),
    offset=st.integers(min_value=0, max_value=2**62),
)
def test_round_trip_property(topic, key, props, body, offset):
    rec = Record(RecordType.MESSAGE, log_offset=offset, topic=topic, key=key,
                 properties=props or None, body=body, queue_id=1, queue_offset=5)
    back = decode(encode(rec), 0, base_offset=offset)
    assert (back.topic, back.key, back.properties or None, back.body) == (
        topic, key, props or None, body)


@pytest.mark.parametrize("cut", range(0, len(GOLDEN_MESSAGE)))
def test_every_truncation_is_torn(cut):
    with pytest.raises(IncompleteRecord):
        decode(GOLDEN_MESSAGE[:cut] if cut >= HEADER_SIZE else GOLDEN_MESSAGE[:cut], 0,
               base_offset=4096)


@pytest.mark.parametrize("byte", range(0, len(GOLDEN_MESSAGE)))
def test_every_bit_flip_is_detected(byte):
    data = bytearray(GOLDEN_MESSAGE)
    data[byte] ^= 0x10
    with pytest.raises((BadRecord, IncompleteRecord)):
        decode(bytes(data), 0, base_offset=4096)


def test_record_at_the_wrong_offset_is_rejected():
    with pytest.raises(BadRecord, match="claims log offset 4096"):
        decode(GOLDEN_MESSAGE, 0, base_offset=0)


def test_length_is_checked_before_anything_is_allocated():
    huge = bytearray(GOLDEN_MESSAGE)
    struct.pack_into("<I", huge, 0, 0xFFFFFFF0)
    with pytest.raises(BadRecord, match="outside"):
        decode(bytes(huge), 0, base_offset=4096, max_record_size=1 << 20)
    with pytest.raises(IncompleteRecord):  # within the limit but beyond the bytes available
        decode(bytes(huge), 0, base_offset=4096)


def test_properties_codec_rejects_garbage():
    assert decode_properties(encode_properties({"k": "v", "x": ""})) == {"k": "v", "x": ""}
    for bad in (b"\x01", b"\x01\x00\x05\x00ab", b"\x00\x00junk", b"\x01\x00\x01\x00\xff\x00\x00"):
        with pytest.raises(BadRecord):
            decode_properties(bad)


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=64))
def test_random_bytes_raise_only_typed_errors(data, pos):
    try:
        decode(data, min(pos, len(data)), base_offset=0, max_record_size=1 << 16)
    except FMQError:
        pass


@pytest.mark.parametrize("props", [None, {}, {"a": "b"}, {"k\u00e9y": "v\u00e4lue", "": "", "x": "y" * 300}])
def test_sizes_computed_without_encoding_match_what_encode_writes(props):
    from fmq.log.record import encode_properties, encoded_size, properties_length
    from fmq.message import Message

    assert properties_length(props) == len(encode_properties(props))
    msg = Message("orders", b"body" * 9, key="k\u00e9y", tags="t", properties=props)
    rec = Record(RecordType.MESSAGE, topic=msg.topic, key=msg.key, tags=msg.tags,
                 properties=msg.properties, body=msg.body)
    assert encoded_size(msg) == len(encode(rec))
