"""Produce's own request reader (``fmq.server.kafka.produce_request``) against kio's, the
reference the dispatcher uses for every other API: the same fields for any request kio
writes over every served version, and for frames damaged at random (bytes changed, cut
short, lengthened) the same fields or the same error."""

from __future__ import annotations

import datetime
import io
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer

from fmq.server.kafka.apis import API_TABLE
from fmq.server.kafka.produce_request import (
    VERSIONS,
    ProduceRequest,
    read_produce_request,
    reference_produce_request,
)

TEXT = st.text(max_size=200)  # past 127 bytes: a compact length of two varint bytes
RECORDS = st.none() | st.binary(max_size=300)


def _frame(version: int, client_id: str | None, transactional_id: str | None, acks: int,
           timeout_ms: int, topics: list) -> bytes:
    """The frame (after its size) kio writes for the request."""
    cls = load_request_schema(0, version)
    module = sys.modules[cls.__module__]
    request = cls(transactional_id=transactional_id, acks=acks,
                  timeout=datetime.timedelta(milliseconds=timeout_ms),
                  topic_data=tuple(module.TopicProduceData(
                      name=name, partition_data=tuple(module.PartitionProduceData(
                          index=index, records=records) for index, records in parts))
                      for name, parts in topics))
    header = cls.__header_schema__
    out = io.BytesIO()
    entity_writer(header)(out, header(request_api_key=0, request_api_version=version,
                                      correlation_id=7, client_id=client_id))
    entity_writer(cls)(out, request)
    return out.getvalue()


FRAMES = st.builds(
    _frame, st.sampled_from(list(VERSIONS)), st.none() | TEXT, st.none() | TEXT,
    st.integers(-(2**15), 2**15 - 1), st.integers(0, 2**31 - 1),
    st.lists(st.tuples(TEXT, st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), RECORDS),
                                      max_size=3)), max_size=3))


def _fields(request) -> tuple:
    return (request.transactional_id, request.acks, request.timeout,
            [(t.name, [(p.index, None if p.records is None else bytes(p.records))
                       for p in t.partition_data]) for t in request.topic_data])


def _outcome(fn, frame: bytes, version: int) -> tuple:
    try:
        return ("read", _fields(fn(frame, version)))
    except Exception as exc:  # noqa: BLE001 - the two must fail alike, whatever it is
        return ("raised", type(exc).__name__, str(exc))


def _version(frame: bytes) -> int:
    return int.from_bytes(frame[2:4], "big")


@settings(max_examples=300, deadline=None)
@given(FRAMES)
def test_kio_s_frames_are_read_as_kio_reads_them(frame):
    version = _version(frame)
    assert _outcome(read_produce_request, frame, version) == \
        _outcome(reference_produce_request, frame, version)
    # read by this reader, not handed to kio
    assert type(read_produce_request(frame, version)) is ProduceRequest


@settings(max_examples=500, deadline=None)
@given(FRAMES, st.data())
def test_damaged_frames_are_read_or_refused_as_kio_does(frame, data):
    version = _version(frame)
    damaged = bytearray(frame)
    how = data.draw(st.sampled_from(["change", "cut", "lengthen"]))
    if how == "change":
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(8, len(damaged) - 1)) if len(damaged) > 8 else None
            if at is not None:
                damaged[at] = data.draw(st.integers(0, 255))
    elif how == "cut":
        del damaged[data.draw(st.integers(8, len(damaged))):]
    else:
        damaged += data.draw(st.binary(min_size=1, max_size=8))
    assert _outcome(read_produce_request, bytes(damaged), version) == \
        _outcome(reference_produce_request, bytes(damaged), version)


def test_the_dispatcher_reads_produce_requests_with_it():
    assert API_TABLE[0].request_reader is read_produce_request
