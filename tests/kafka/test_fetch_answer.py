"""Fetch's own answer writer (``fmq.server.kafka.fetch_answer``) against kio's, the
reference the dispatcher uses for the APIs without one: the same bytes for any values the
handler can give (record batches of any size, empty and null records, the fetch-session
refusal's empty answer), over every served version, and read back by kio as given."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from fmq.server.kafka.apis import API_TABLE
from fmq.server.kafka.fetch_answer import VERSIONS, fetch_answer, reference_fetch_answer
from tests.kafka.wire import read_answer

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=300)  # past 127 bytes: a compact length of two varint bytes
# Records of up to 70,000 bytes: lengths of one, two and three varint bytes.
RECORDS = st.none() | st.binary(max_size=200) | st.integers(0, 70_000).map(lambda n: b"r" * n)

PARTITION = st.fixed_dictionaries({
    "partition_index": I32,
    "error_code": st.sampled_from(list(ErrorCode)),
    "high_watermark": I64,
    "last_stable_offset": I64,
    "log_start_offset": I64,
    "aborted_transactions": st.none(),
    "preferred_read_replica": I32,
    "records": RECORDS,
})
TOPIC = st.fixed_dictionaries({"topic": TEXT, "partitions": st.lists(PARTITION, max_size=4)})
VALUES = st.fixed_dictionaries({"throttle_time": st.integers(0, 2**31 - 1),
                                "error_code": st.sampled_from(list(ErrorCode)),
                                "session_id": I32,
                                "responses": st.lists(TOPIC, max_size=140)})


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(list(VERSIONS)), I32, VALUES)
def test_every_served_version_is_written_as_kio_writes_it(version, correlation_id, values):
    assert fetch_answer(correlation_id, version, values) == \
        reference_fetch_answer(correlation_id, version, values)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(list(VERSIONS)), I32, VALUES)
def test_kio_reads_the_answer_back_as_the_values(version, correlation_id, values):
    read_id, answer = read_answer(1, version, fetch_answer(correlation_id, version, values))
    assert read_id == correlation_id
    got = [(t.topic, [(p.partition_index, p.error_code, p.high_watermark, p.records)
                      for p in t.partitions]) for t in answer.responses]
    assert got == [(t["topic"], [(p["partition_index"], p["error_code"], p["high_watermark"],
                                  p["records"]) for p in t["partitions"]])
                   for t in values["responses"]]


@pytest.mark.parametrize("version", [4, 11, 12])
def test_aborted_transactions_are_written_by_kio(version):
    values = {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "partitions": [{
            "partition_index": 0, "error_code": 0, "high_watermark": 5,
            "last_stable_offset": 3, "log_start_offset": 0, "preferred_read_replica": -1,
            "aborted_transactions": [{"producer_id": 7, "first_offset": 3}],
            "records": b"batch"}]}]}
    assert fetch_answer(3, version, values) == reference_fetch_answer(3, version, values)


def test_the_dispatcher_writes_fetch_answers_with_it():
    assert API_TABLE[1].answer_writer is fetch_answer
    assert [API_TABLE[1].min_version, API_TABLE[1].max_version] == [VERSIONS[0], VERSIONS[-1]]
