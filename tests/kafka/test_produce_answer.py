"""Produce's own answer writer (``fmq.server.kafka.produce_answer``) against kio's, the
reference the dispatcher uses for every other API: the same bytes for any values the
handler can give, over every served version, and read back by kio as the values given."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from fmq.server.kafka.apis import API_TABLE
from fmq.server.kafka.produce_answer import (
    VERSIONS,
    produce_answer,
    reference_produce_answer,
)
from tests.kafka.wire import read_answer

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=300)  # past 127 bytes: a compact length of two varint bytes

PARTITION = st.fixed_dictionaries({
    "index": I32,
    "error_code": st.sampled_from(list(ErrorCode)),
    "base_offset": I64,
    "log_append_time": st.none() | st.integers(0, 2**41),
    "log_start_offset": I64,
    "record_errors": st.just([]),
    "error_message": st.none() | TEXT,
})
TOPIC = st.fixed_dictionaries({"name": TEXT,
                               "partition_responses": st.lists(PARTITION, max_size=4)})
VALUES = st.fixed_dictionaries({"responses": st.lists(TOPIC, max_size=200),
                                "throttle_time": st.integers(0, 2**31 - 1)})


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(list(VERSIONS)), I32, VALUES)
def test_every_served_version_is_written_as_kio_writes_it(version, correlation_id, values):
    assert produce_answer(correlation_id, version, values) == \
        reference_produce_answer(correlation_id, version, values)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(list(VERSIONS)), I32, VALUES)
def test_kio_reads_the_answer_back_as_the_values(version, correlation_id, values):
    read_id, answer = read_answer(0, version, produce_answer(correlation_id, version, values))
    assert read_id == correlation_id
    assert answer.throttle_time == datetime.timedelta(milliseconds=values["throttle_time"])
    got = [(t.name, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
           for t in answer.responses]
    assert got == [(t["name"], [(p["index"], p["error_code"], p["base_offset"])
                                for p in t["partition_responses"]])
                   for t in values["responses"]]


@pytest.mark.parametrize("version", [8, 9])
def test_record_errors_are_written_by_kio(version):
    values = {"throttle_time": 0, "responses": [{"name": "t", "partition_responses": [{
        "index": 0, "error_code": ErrorCode.invalid_record, "base_offset": -1,
        "log_append_time": None, "log_start_offset": -1, "error_message": "bad record",
        "record_errors": [{"batch_index": 3, "batch_index_error_message": "bad"}]}]}]}
    assert produce_answer(7, version, values) == reference_produce_answer(7, version, values)


def test_the_dispatcher_writes_produce_answers_with_it():
    assert API_TABLE[0].answer_writer is produce_answer
    assert [API_TABLE[0].min_version, API_TABLE[0].max_version] == [VERSIONS[0], VERSIONS[-1]]
