"""The transaction writer's REF-versus-copy rule uses the codec's own size of a record."""

from __future__ import annotations

from fmq.log.record import Record, RecordType, encode, encoded_length


def test_encoded_length_of_a_ref_record_is_what_encode_writes():
    ref = Record(RecordType.REF_MESSAGE, queue_id=1, queue_offset=7, ref_offset=100,
                 ref_size=300, topic="orders", tx_id="tx-1", key="k\u00e9y", tags="t")
    assert encoded_length(ref) == len(encode(ref))


def test_encoded_length_counts_body_and_properties_of_a_copy():
    rec = Record(RecordType.TX_MESSAGE, topic="pay", tx_id="tx-2", producer_group="shop",
                 properties={"a": "b"}, body=b"x" * 33)
    assert encoded_length(rec) == len(encode(rec))
