"""Produce's answer written straight from the handler's values, one small layout per version.

Every other API's answer goes through :func:`fmq.server.kafka.entities.build` and kio's
writer: general, but for Produce, answered once per record batch a producer sends, that was
about 330k instructions a request (5k a message of librdkafka's batches of 64), more than
the door's own record decoding. The layouts below are Kafka's ProduceResponse v3..v9 (the
versions :mod:`fmq.server.kafka.produce` serves), from the same schemas kio is generated
from: v3-v4 a partition's index, error code, base offset and log append time; v5 adds the
log start offset; v8 the record errors and the error message; v9 is the flexible version
(compact lengths, an empty tagged-field section after each structure and after the
response header).

kio's path stays the reference: :func:`reference_produce_answer` is what the dispatcher
writes for every other API, and the answer takes it for anything these layouts do not
write (record errors, which this server never gives, or a version it does not serve).
tests/kafka/test_produce_answer.py holds the two byte for byte equal over every served
version.
"""

from __future__ import annotations

import struct
from typing import Any

from kio.index import load_response_schema

from fmq.server.kafka.answer_fields import I32, count, framed, nullable_string, string
from fmq.server.kafka.entities import build
from fmq.server.kafka.framing import encode_response

#: The versions written here (Produce's served range).
VERSIONS = range(3, 10)
#: The first flexible version (compact encodings, tagged fields).
FLEXIBLE = 9

#: index, error code, base offset, log append time (v3+).
_PARTITION_V3 = struct.Struct(">ihqq")
#: ... and the log start offset (v5+).
_PARTITION_V5 = struct.Struct(">ihqqq")


def reference_produce_answer(correlation_id: int, version: int, values: dict) -> bytes:
    """The framed answer as kio writes it from ``values`` (the handler's dicts)."""
    return encode_response(correlation_id, build(load_response_schema(0, version), values))


def produce_answer(correlation_id: int, version: int, values: dict) -> bytes:
    """The framed Produce answer of ``version`` to ``values``, the handler's dicts (as
    :func:`reference_produce_answer` writes them)."""
    if version not in VERSIONS:
        return reference_produce_answer(correlation_id, version, values)
    flexible = version >= FLEXIBLE
    topics = values["responses"]
    out = [count(len(topics), flexible)]
    for topic in topics:
        out.append(string(topic["name"], flexible))
        parts = topic["partition_responses"]
        out.append(count(len(parts), flexible))
        for part in parts:
            if part.get("record_errors"):
                return reference_produce_answer(correlation_id, version, values)
            out.append(_partition(part, version, flexible))
        if flexible:
            out.append(b"\0")
    out.append(I32.pack(values.get("throttle_time", 0)))
    if flexible:
        out.append(b"\0")
    return framed(correlation_id, flexible, out)


def _partition(part: dict[str, Any], version: int, flexible: bool) -> bytes:
    append_time = part.get("log_append_time")
    fixed = (part["index"], part["error_code"], part["base_offset"],
             -1 if append_time is None else append_time)
    if version < 5:
        return _PARTITION_V3.pack(*fixed)
    start = part.get("log_start_offset", -1)
    data = _PARTITION_V5.pack(*fixed, start)
    if version < 8:
        return data
    # record_errors: always empty here (produce_answer hands any other to kio).
    data += count(0, flexible) + nullable_string(part.get("error_message"), flexible)
    return data + b"\0" if flexible else data
