"""The Kafka door's compiled record codec (``fmq.server.kafka._record_messages_c``) against
its references (``fmq.server.kafka.record_messages``): a Produce's record batches give equal
messages (properties in the same order) or the same error (type, message, Kafka code), for
client batches (kafka-python's encoder, every codec, idempotent and control batches) and
hostile ones (a bad CRC, varints of 10 bytes and more, negative and overlong lengths,
truncated, bytes changed with the CRC made right again); a Fetch's batch of stored messages
is the same bytes, or the same error, for any properties, timestamps, keys and offsets."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from fmq.message import PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY, StoredMessage
from fmq.server.kafka import record_messages as R
from fmq.server.kafka.mapping import CREATE_TIME_PROPERTY, ESCAPE, NULL_VALUE_PROPERTY
from fmq.server.kafka.records import BATCH_OVERHEAD, CRC_FROM
from tests.native.twins import compiled

LIMIT = 1 << 20
TEXT = st.text(max_size=8)
NAMES = st.sampled_from(["h", "trace", "é", CREATE_TIME_PROPERTY, NULL_VALUE_PROPERTY,
                         "%producer", "%x"]) | TEXT
VALUES = st.none() | st.binary(max_size=40)
KEYS = st.none() | st.binary(max_size=8) | TEXT.map(str.encode)
RECORD = st.tuples(KEYS, VALUES, st.lists(st.tuples(NAMES, VALUES), max_size=3),
                   st.integers(-5, 5_000))


@pytest.fixture(scope="module")
def module():
    return compiled("fmq.server.kafka._record_messages_c")


@pytest.fixture(scope="module")
def decode(module):
    return module.RecordMessages(R.reference_messages).decode


@pytest.fixture(scope="module")
def decode_plain(module):
    return module.RecordMessages(R.reference_messages, R.reference_plain_messages).decode_plain


@pytest.fixture(scope="module")
def encode(module):
    return module.MessageBatch(R.reference_batch).encode


def _outcome(fn, *args) -> tuple:
    """A call's value (messages as their fields, properties in order), or its error's type,
    message and Kafka code."""
    try:
        value = fn(*args)
    except Exception as exc:  # noqa: BLE001 - the twins must fail alike, whatever it is
        return ("raised", type(exc).__name__, str(exc), getattr(exc, "code", None))
    if isinstance(value, list):
        return ("value", _fields(value))
    if isinstance(value, tuple):  # decode_plain's (messages, largest)
        messages, largest = value
        return ("value", _fields(messages), largest)
    return ("value", value)


def _fields(messages: list) -> list[tuple]:
    return [(m.topic, m.body, m.key, m.tags,
             None if m.properties is None else list(m.properties.items()), m.queue_id)
            for m in messages]


def client_batch(records, codec: int = 0, base_ts: int = 1_700_000_000_000,
                 producer: tuple[int, int, int] = (-1, -1, -1),
                 transactional: bool = False) -> bytes:
    """A batch as kafka-python's encoder writes it."""
    producer_id, epoch, sequence = producer
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec,
                                        is_transactional=transactional,
                                        producer_id=producer_id, producer_epoch=epoch,
                                        base_sequence=sequence, batch_size=LIMIT)
    for i, (key, value, headers, ts) in enumerate(records):
        builder.append(i, timestamp=base_ts + ts, key=key, value=value, headers=headers)
    return bytes(builder.build())


def _recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_FROM - 4, crc32c(bytes(batch[CRC_FROM:])))
    return bytes(batch)


def _both(decode, data: bytes, topic: str = "t", partition: int = 3) -> tuple[tuple, tuple]:
    return (_outcome(decode, data, LIMIT, topic, partition),
            _outcome(R.reference_messages, data, LIMIT, topic, partition))


# ------------------------------------------------------------------ Produce


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.lists(RECORD, min_size=1, max_size=5), min_size=1, max_size=3),
       codec=st.sampled_from([0, 0, 1, 3, 4]), base_ts=st.sampled_from(
           [1_700_000_000_000, 0, -3, 2**62 + 1, -(2**62) - 1]),
       producer=st.sampled_from([(-1, -1, -1), (7, 2, 0), (2**62, 0, 100), (5, 1, -1)]))
def test_client_batches_give_the_same_messages(decode, batches, codec, base_ts, producer):
    data = b"".join(client_batch(b, codec, base_ts, producer) for b in batches)
    fast, reference = _both(decode, data)
    assert fast == reference


def test_the_common_batch_is_read_in_c_with_its_create_time_and_numbering(decode):
    """The librdkafka producer's batch (keyless, no headers) and an idempotent one: the
    messages as the reference makes them, properties in the same order."""
    records = [(None, b"x" * 1024, [], i // 3) for i in range(10)]
    for producer in ((-1, -1, -1), (9, 4, 17)):
        fast, reference = _both(decode, client_batch(records, producer=producer))
        assert fast == reference
        assert fast[0] == "value" and len(fast[1]) == 10
    props = dict(fast[1][4][4])
    assert list(props) == [CREATE_TIME_PROPERTY, PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY]
    assert props[SEQUENCE_PROPERTY] == "21" and props[PRODUCER_ID_PROPERTY] == "kafka-9-4-3"


@settings(max_examples=400, deadline=None)
@given(records=st.lists(RECORD, min_size=1, max_size=3), data=st.data(),
       how=st.sampled_from(["changed, CRC made right", "changed", "truncated", "trailing",
                            "count", "control", "magic", "length"]))
def test_hostile_batches_fail_alike(decode, records, data, how):
    batch = bytearray(client_batch(records))
    if how.startswith("changed"):
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(BATCH_OVERHEAD, len(batch) - 1))
            batch[at] = data.draw(st.integers(0, 255))
        if how == "changed, CRC made right":
            batch = bytearray(_recrc(batch))
    elif how == "truncated":
        batch = batch[:data.draw(st.integers(0, len(batch) - 1))]
    elif how == "trailing":
        batch += data.draw(st.binary(min_size=1, max_size=70))
    elif how == "count":
        struct.pack_into(">i", batch, BATCH_OVERHEAD - 4, data.draw(st.integers(-2, 8)))
        batch = bytearray(_recrc(batch))
    elif how == "control":
        batch[CRC_FROM + 1] |= 0x20
        batch = bytearray(_recrc(batch))
    elif how == "magic":
        batch[16] = data.draw(st.integers(0, 255))
    else:
        struct.pack_into(">i", batch, 8, data.draw(st.integers(-(2**31), 2**31 - 1)))
    fast, reference = _both(decode, bytes(batch))
    assert fast == reference


def _one_record_batch(record_body: bytes) -> bytes:
    """A batch of one record whose bytes (after its length varint) are ``record_body``."""
    assert len(record_body) < 64  # its length a varint of one byte
    batch = bytearray(client_batch([(None, b"v", [], 0)]))
    batch = batch[:BATCH_OVERHEAD] + bytes([len(record_body) << 1]) + record_body
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    return _recrc(batch)


@pytest.mark.parametrize("record_body", [
    b"\x00" + b"\xff" * 10 + b"\x00",  # a timestamp delta varint of 11 bytes
    b"\x00" + b"\xff" * 9 + b"\x01\x00\x01\x01\x00",  # 10 bytes: past 64 bits
    b"\x00\x00\x00\x00\x02v\x00",  # key length 0, then value: fine
    b"\x00\x00\x00\x03\x02v\x00",  # key length -2: null
    b"\x00\x00\x00\x7e\x02v\x00",  # key length 63: past the record
    b"\x00\x00\x00\x01\x02v\x02\x01\x00",  # a header with a null name
    b"\x00\x00\x00\x01\x02v\x01\x02h\x00",  # header count -1
    b"\x00\x00\x00\x01\x02v\x04\x02h\x00",  # two headers announced, one there
    b"\x00\x00\x00\x01\x02v\x02\x02\xff\x00",  # a header name that is not UTF-8
    b"\x00\x00\x00\x02\xff\x02v\x00",  # a key that is not UTF-8
    b"\x00\x00\x00\x01\x02v\x80\x00",  # no headers, said in two bytes
    b"\x00\x00\x00\x01\x02v\x00\x00",  # a byte left in the record
])
def test_hand_made_records_fail_or_pass_alike(decode, record_body):
    fast, reference = _both(decode, _one_record_batch(record_body))
    assert fast == reference


def test_other_inputs_go_to_the_reference(decode):
    data = client_batch([(None, b"v", [], 0)])
    for records in (bytearray(data), memoryview(data), b"", None):
        assert _outcome(decode, records, LIMIT, "t", 0) == \
            _outcome(R.reference_messages, records, LIMIT, "t", 0)


# ------------------------------------------------------------------ Produce: plain messages

#: Keys and header names and values around the plain rules: NUL, 255 and 256 bytes,
#: non-ASCII text, a "%" name, sizes near MAX_PROPERTIES.
PLAIN_KEYS = KEYS | st.sampled_from([b"k" * 255, b"k" * 256, "é".encode() * 128,
                                     "é".encode() * 127 + b"k", b"a\x00b", b"\x00"])
PLAIN_NAMES = NAMES | st.sampled_from(["%", "é" * 3, "n" * 300, ""])
PLAIN_VALUES = VALUES | st.sampled_from([b"v" * 32_000, b"\x00", "é".encode(), b"\xff"])
PLAIN_RECORD = st.tuples(PLAIN_KEYS, VALUES, st.lists(st.tuples(PLAIN_NAMES, PLAIN_VALUES),
                                                      max_size=3),
                         st.integers(-5, 5_000))


def _both_plain(decode_plain, data: bytes) -> tuple[tuple, tuple]:
    return (_outcome(decode_plain, data, LIMIT, "t", 3),
            _outcome(R.reference_plain_messages, data, LIMIT, "t", 3))


@settings(max_examples=400, deadline=None)
@given(batches=st.lists(st.lists(PLAIN_RECORD, min_size=1, max_size=5), min_size=1,
                        max_size=3),
       codec=st.sampled_from([0, 0, 1]), base_ts=st.sampled_from([1_700_000_000_000, -3]),
       producer=st.sampled_from([(-1, -1, -1), (-1, -1, -1), (7, 2, 0)]))
def test_plain_messages_and_their_largest_body_are_found_alike(decode_plain, batches, codec,
                                                                base_ts, producer):
    """The twin's verdict (each message passes check_message's own-field rules) and the
    index of the first largest body are the reference's, on the same messages."""
    data = b"".join(client_batch(b, codec, base_ts, producer) for b in batches)
    fast, reference = _both_plain(decode_plain, data)
    assert fast == reference


@settings(max_examples=200, deadline=None)
@given(records=st.lists(PLAIN_RECORD, min_size=1, max_size=3), data=st.data())
def test_plain_decodes_of_damaged_batches_fail_alike(decode_plain, records, data):
    batch = bytearray(client_batch(records))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(BATCH_OVERHEAD, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    fast, reference = _both_plain(decode_plain, _recrc(batch))
    assert fast == reference


def test_the_plain_verdict_names_what_check_message_would_look_at(decode_plain):
    """The producer's batch is plain (its CreateTime an ASCII property) and the largest body
    is the first of the longest; a key of 256 bytes, a NUL in a key, a non-ASCII header and
    an idempotent producer's "%" properties each make the batch's verdict -1."""
    records = [(None, b"x" * 10, [], 0), (b"k", b"y" * 30, [("h", b"v")], 1),
               (None, b"z" * 30, [], 2)]
    assert decode_plain(client_batch(records), LIMIT, "t", 0)[1] == 1
    for odd in ((b"k" * 256, b"v", [], 0), (b"a\x00", b"v", [], 0),
                (None, b"v", [("h", "é".encode())], 0)):
        assert decode_plain(client_batch(records + [odd]), LIMIT, "t", 0)[1] == -1
    idempotent = client_batch(records, producer=(7, 2, 0))
    assert decode_plain(idempotent, LIMIT, "t", 0)[1] == -1
    assert decode_plain(client_batch(records + [(b"k" * 255, b"v", [], 0)]), LIMIT, "t",
                        0)[1] == 1


def test_plain_decodes_of_other_inputs_go_to_the_reference(decode_plain):
    data = client_batch([(None, b"v", [], 0)])
    for records in (bytearray(data), memoryview(data), b"", None):
        assert _outcome(decode_plain, records, LIMIT, "t", 0) == \
            _outcome(R.reference_plain_messages, records, LIMIT, "t", 0)


# ------------------------------------------------------------------ Fetch


PROPERTY_TEXTS = (st.sampled_from(["1", "0", "", "12", "١٢", "²", "9" * 18, "9" * 19,
                                   ESCAPE, ESCAPE + "aGk=", ESCAPE + "!!", "\ud800", "x"])
                  | TEXT)
PROPERTIES = st.none() | st.dictionaries(
    st.sampled_from([CREATE_TIME_PROPERTY, NULL_VALUE_PROPERTY, PRODUCER_ID_PROPERTY,
                     SEQUENCE_PROPERTY, "%principal", "h", "é"]) | TEXT,
    PROPERTY_TEXTS, max_size=4)
STORED = st.tuples(st.integers(0, 3), st.binary(max_size=30) | st.just(b""),
                   st.none() | st.just("") | TEXT | st.just("\udc80"), PROPERTIES,
                   st.sampled_from([0, 1_700_000_000_000, -1, 2**62, 2**63 + 5]))


def _stored(rows, base: int) -> list[StoredMessage]:
    out, offset = [], base
    for gap, body, key, properties, store_time in rows:
        offset += gap
        out.append(StoredMessage("t", 0, offset, 100 * offset, body, key, None,
                                 properties, store_time))
    return out


@settings(max_examples=600, deadline=None)
@given(rows=st.lists(STORED, min_size=1, max_size=6),
       base=st.sampled_from([0, 5, 2**40, 2**63 - 3]),
       epoch=st.sampled_from([0, 3, -1, 2**31 - 1, 2**31]))
def test_a_fetch_batch_is_the_same_bytes(encode, rows, base, epoch):
    messages = _stored(rows, base)
    assert _outcome(encode, messages, epoch) == _outcome(R.reference_batch, messages, epoch)


def test_the_common_fetch_batch_is_the_same_bytes_and_carries_its_epoch(encode):
    messages = _stored([(1, b"x" * 1024, None, {CREATE_TIME_PROPERTY: str(1_700_000_000_000
                                                                         + i // 4)},
                         1_700_000_000_999) for i in range(64)], 10)
    batch = encode(messages, 7)
    assert batch == R.reference_batch(messages, 7)
    assert struct.unpack_from(">qiib", batch) == (11, len(batch) - 12, 7, 2)


def test_an_offset_gap_past_the_delta_field_fails_alike(encode):
    messages = _stored([(0, b"a", None, None, 5), (2**31, b"b", None, None, 5)], 0)
    assert _outcome(encode, messages, 0) == _outcome(R.reference_batch, messages, 0)


def _refused(*args):
    raise AssertionError(f"the reference was asked: {args!r:.80}")


@pytest.mark.parametrize("codec", [0, 1, 3, 4])
def test_well_formed_batches_never_reach_the_reference(module, codec):
    """Plain, compressed, idempotent batches with headers (escaped values too) and null
    values are read in C: a twin that handed everything to the reference would pass the
    comparisons above and be no faster."""
    decode = module.RecordMessages(_refused).decode
    records = [(None, b"x" * 100, [], 0), (b"k", None, [("h", b"v"), ("n", None),
                                                      ("b", b"\x00\xff")], 3)]
    for producer in ((-1, -1, -1), (3, 1, 5)):
        data = client_batch(records, codec, producer=producer)
        assert [m.body for m in decode(data, LIMIT, "t", 1)] == [b"x" * 100, b""]
    encode = module.MessageBatch(_refused).encode
    messages = _stored([(1, b"x", None, {CREATE_TIME_PROPERTY: "12"}, 5),
                        (1, b"", "k", {SEQUENCE_PROPERTY: "1", NULL_VALUE_PROPERTY: "1",
                                       "h": ESCAPE + "aGk="}, 6)], 0)
    assert encode(messages, 3) == R.reference_batch(messages, 3)
