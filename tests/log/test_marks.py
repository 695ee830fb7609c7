"""The mark encoder (PREPARE, COMMIT, ROLLBACK) writes exactly the general encoder's bytes,
and hands everything it is not made for to the general encoder."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fmq.log.record import Record, RecordType, decode, encode_into, encode_mark_into

MARKS = (RecordType.PREPARE, RecordType.COMMIT, RecordType.ROLLBACK)
NAMES = st.text(min_size=1, max_size=80)


def both(record: Record, prefix: bytes = b"") -> tuple[bytes, bytes, int, int]:
    general, marks = bytearray(prefix), bytearray(prefix)
    a = encode_into(general, len(prefix), record)
    b = encode_mark_into(marks, len(prefix), record)
    return bytes(general), bytes(marks), a, b


@given(st.sampled_from(MARKS), NAMES, NAMES, st.integers(0, 2**62),
       st.integers(-1, 2**62), st.integers(0, 2**32 - 1), st.binary(max_size=40))
def test_marks_are_byte_for_byte_the_general_encoding(kind, tx_id, group, offset, ref_offset,
                                                       ref_size, prefix):
    rec = Record(kind, log_offset=offset, store_time=1_700_000_000_000, tx_id=tx_id,
                 producer_group=group, ref_offset=ref_offset, ref_size=ref_size)
    general, marks, a, b = both(rec, prefix)
    assert marks == general and a == b == rec.size
    back = decode(marks[len(prefix):], 0, base_offset=offset)
    assert (back.type, back.tx_id, back.producer_group, back.ref_offset, back.ref_size) == (
        kind, tx_id, group, ref_offset, ref_size)


@pytest.mark.parametrize("extra", [{"topic": "t"}, {"key": "k"}, {"tags": "a"},
                                   {"properties": {"p": "v"}}, {"body": b"x"}])
def test_a_record_with_other_fields_is_encoded_by_the_general_encoder(extra):
    rec = Record(RecordType.PRE_MESSAGE, log_offset=72, tx_id="tx", producer_group="g",
                 **extra)
    general, marks, _, _ = both(rec)
    assert marks == general


def test_a_write_into_the_middle_of_a_buffer_is_the_general_encoders():
    rec = Record(RecordType.COMMIT, log_offset=0, tx_id="tx", producer_group="g",
                 ref_offset=5)
    general, marks = bytearray(300), bytearray(300)
    encode_into(general, 10, rec)
    encode_mark_into(marks, 10, rec)
    assert marks == general and len(marks) == 300


def test_an_oversized_field_is_refused_as_before():
    rec = Record(RecordType.PREPARE, tx_id="x" * 70000, producer_group="g")
    with pytest.raises(ValueError, match="tx_id is longer"):
        encode_mark_into(bytearray(), 0, rec)
