"""Fetch's compiled batch writer (``fmq.server.kafka._stored_batches_c``) against its
reference (``fmq.server.kafka.stored_batches``: a pull's decode of each record, then the
door's mapping and batch): for records as the log stores them, the same batch bytes, message
count and body bytes, or the same error (type and message), for any keys, properties
(the door's own, the dedup window's, escaped values, names given twice), bodies, store
times and offsets, and for damaged records (a byte changed, with and without the CRC made
right again, truncated, at another log offset), deleted ones (None) and other inputs."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.log.record import RecordType
from fmq.log.record.layout import HEADER_SIZE
from fmq.message import PRINCIPAL_PROPERTY, PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY
from fmq.server.kafka import stored_batches as S
from fmq.server.kafka.mapping import CREATE_TIME_PROPERTY, ESCAPE, NULL_VALUE_PROPERTY
from fmq.server.kafka.records import decode_batches
from tests.native.stored_records import DAMAGES, damaged_records, record_bytes
from tests.native.twins import compiled, outcome

LIMIT = 1 << 20
TEXT = st.text(max_size=8)
PROPERTY_TEXTS = (st.sampled_from(["1", "0", "", "12", "١٢", "²", "9" * 18, "9" * 19,
                                   ESCAPE, ESCAPE + "aGk=", ESCAPE + "!!", "x"])
                  | TEXT)
PROPERTIES = st.none() | st.lists(st.tuples(
    st.sampled_from([CREATE_TIME_PROPERTY, NULL_VALUE_PROPERTY, PRODUCER_ID_PROPERTY,
                     SEQUENCE_PROPERTY, PRINCIPAL_PROPERTY, "h", "é"]) | TEXT,
    PROPERTY_TEXTS), max_size=4)
MESSAGE = st.tuples(st.integers(0, 3), st.binary(max_size=30) | st.just(b""),
                    st.none() | st.just("") | TEXT, PROPERTIES,
                    st.sampled_from([0, 1_700_000_000_000, -1, 2**62, 2**63 - 1]),
                    st.none() | TEXT)


@pytest.fixture(scope="module")
def module():
    return compiled("fmq.server.kafka._stored_batches_c")


@pytest.fixture(scope="module")
def encode_c(module):
    return module.StoredBatches(S.reference_stored_batch).encode


def _stored(rows, base: int = 5) -> tuple[list, list]:
    """(index entries, record bytes) of ``rows``, as the log and index hold them."""
    entries, records = [], []
    offset, log_offset = base, 4096
    for gap, body, key, properties, store_time, tags in rows:
        offset += gap
        data = record_bytes(RecordType.MESSAGE, log_offset, offset, body, key, properties,
                            store_time, tags)
        entries.append((offset, log_offset, len(data), 0, store_time))
        records.append(data)
        log_offset += len(data)
    return entries, records


def _both(encode_c, entries, records, epoch=0):
    args = ("t", 0, entries, records, epoch, LIMIT)
    return outcome(encode_c, *args), outcome(S.reference_stored_batch, *args)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(MESSAGE, min_size=1, max_size=5), base=st.integers(0, 2**40),
       epoch=st.integers(-2, 9))
def test_stored_records_give_the_same_batch(encode_c, rows, base, epoch):
    entries, records = _stored(rows, base)
    fast, reference = _both(encode_c, entries, records, epoch)
    assert fast == reference


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(MESSAGE, min_size=1, max_size=3), data=st.data(),
       how=st.sampled_from(DAMAGES))
def test_damaged_or_odd_records_fail_or_pass_alike(encode_c, rows, data, how):
    entries, records = _stored(rows)
    i = data.draw(st.integers(0, len(records) - 1))
    records = damaged_records(data, how, entries, records, i)
    fast, reference = _both(encode_c, entries, records)
    assert fast == reference


def test_the_common_records_make_a_batch_in_c_that_reads_back(module):
    """Messages as the door stores them (a CreateTime each), keys, headers plain, escaped
    and null, a null value, the dedup window's own properties: written without the
    reference, and read back by records.py as the mapping says."""
    def refused(*args):
        raise AssertionError(f"the reference was asked: {args!r}")
    rows = [(0, b"v" * 100, None, [(CREATE_TIME_PROPERTY, "1700000000123")], 5, None),
            (1, b"", "k", [(NULL_VALUE_PROPERTY, "1"), ("h", "text"),
                           ("bin", ESCAPE + "AP8="), ("null", ESCAPE)], 7, "tag"),
            (2, b"w", "é", [(PRODUCER_ID_PROPERTY, "p"), (SEQUENCE_PROPERTY, "3"),
                            (CREATE_TIME_PROPERTY, "abc")], 9, None)]
    entries, records = _stored(rows, base=10)
    batch, count, body_bytes = module.StoredBatches(refused).encode(
        "t", 0, entries, records, 4, LIMIT)
    assert (count, body_bytes) == (3, 101)
    assert (batch, count, body_bytes) == S.reference_stored_batch(
        "t", 0, entries, records, 4, LIMIT)
    base, _length, epoch = struct.unpack_from(">qii", batch)
    assert (base, epoch) == (10, 4)
    [decoded] = decode_batches(batch, LIMIT)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in decoded.records] == [
        (None, b"v" * 100, [], 1_700_000_000_123),
        (b"k", None, [("h", b"text"), ("bin", b"\x00\xff"), ("null", None)], 7),
        ("é".encode(), b"w", [(CREATE_TIME_PROPERTY, b"abc")], 9)]


def test_other_inputs_go_to_the_reference(encode_c):
    entries, records = _stored([(0, b"v", None, None, 1, None)])
    for args in ((entries, [bytearray(records[0])], 0), ([], [], 0), (entries, records, 2**31),
                 (entries, records, "0"), ([list(entries[0])], records, 0),
                 (entries, records + records, 0), ((entries[0],), records, 0)):
        assert outcome(encode_c, "t", 0, *args, LIMIT) == \
            outcome(S.reference_stored_batch, "t", 0, *args, LIMIT)


def test_a_record_longer_than_the_limit_fails_alike(encode_c):
    entries, records = _stored([(0, b"v" * 200, None, None, 1, None)])
    for limit in (HEADER_SIZE, len(records[0]) - 1, len(records[0])):
        assert outcome(encode_c, "t", 0, entries, records, 0, limit) == \
            outcome(S.reference_stored_batch, "t", 0, entries, records, 0, limit)


#: Records the C path takes whole: any text but in property values (ASCII: a CreateTime
#: is plain digits or no number), unique names, timestamps in 0..2**62.
PLAIN_PROPERTIES = st.dictionaries(
    st.sampled_from([CREATE_TIME_PROPERTY, NULL_VALUE_PROPERTY, PRODUCER_ID_PROPERTY,
                     SEQUENCE_PROPERTY, PRINCIPAL_PROPERTY, "h", "é"]) | TEXT,
    st.sampled_from(["1", "", "12", "9" * 18, "x", ESCAPE, ESCAPE + "aGk=", ESCAPE + "!!"])
    | st.text(st.characters(max_codepoint=0x7F, exclude_characters="0123456789"),
              max_size=6),
    max_size=4).map(lambda d: list(d.items()) or None)
PLAIN = st.tuples(st.integers(0, 3), st.binary(max_size=30), st.none() | TEXT,
                  PLAIN_PROPERTIES, st.integers(0, 2**62 - 1), st.none() | TEXT)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(PLAIN, min_size=1, max_size=6), base=st.integers(0, 2**40),
       epoch=st.integers(-(2**31), 2**31 - 1))
def test_well_formed_records_never_reach_the_reference(module, rows, base, epoch):
    def refused(*args):
        raise AssertionError("the reference was asked")
    entries, records = _stored(rows, base)
    assert module.StoredBatches(refused).encode("t", 0, entries, records, epoch, LIMIT) == \
        S.reference_stored_batch("t", 0, entries, records, epoch, LIMIT)
