"""Fetch's answer written straight from the handler's values, one small layout per version.

A Fetch answer is mostly its record batches, up to 1 MiB a partition. kio's writer (as for
every other API: :func:`fmq.server.kafka.entities.build`, then the entity written into a
growing ``BytesIO`` and copied out of it) copies each batch twice into buffers it grows as
it goes, fresh memory the allocator maps for every fetch: row 8's group of 4 made the
server take 0.6-0.7 minor page faults a message so. Here the fixed fields are packed and
the batches joined once into the framed answer. The layouts are Kafka's FetchResponse
v4..v12 (the versions :mod:`fmq.server.kafka.fetch` serves): v5 adds a partition's log
start offset, v7 the answer's error code and fetch session id, v11 a partition's preferred
read replica; v12 is the flexible version (compact lengths, an empty tagged-field section
after each structure and after the response header: the diverging epoch, current leader
and snapshot id, tagged fields, keep their defaults, which are not written).

kio's path stays the reference: :func:`reference_fetch_answer`, which the answer takes for
anything these layouts do not write (aborted transactions, which this server never lists,
or a version it does not serve). tests/kafka/test_fetch_answer.py holds the two byte for
byte equal over every served version.
"""

from __future__ import annotations

import struct
from typing import Any

from kio.index import load_response_schema

from fmq.server.kafka.answer_fields import (
    I32,
    count,
    framed,
    nullable_bytes_length,
    string,
)
from fmq.server.kafka.entities import build
from fmq.server.kafka.framing import encode_response

#: The versions written here (Fetch's served range).
VERSIONS = range(4, 13)
#: The first flexible version (compact encodings, tagged fields).
FLEXIBLE = 12

#: throttle time, error code, session id (v7+).
_TOP_V7 = struct.Struct(">ihi")
#: partition index, error code, high watermark, last stable offset (v4+).
_PARTITION_V4 = struct.Struct(">ihqq")
#: ... and the log start offset (v5+).
_PARTITION_V5 = struct.Struct(">ihqqq")
#: A null array of aborted transactions: classic, compact.
_NO_ABORTED = (b"\xff\xff\xff\xff", b"\0")


def reference_fetch_answer(correlation_id: int, version: int, values: dict) -> bytes:
    """The framed answer as kio writes it from ``values`` (the handler's dicts)."""
    return encode_response(correlation_id, build(load_response_schema(1, version), values))


def fetch_answer(correlation_id: int, version: int, values: dict) -> bytes:
    """The framed Fetch answer of ``version`` to ``values``, the handler's dicts (as
    :func:`reference_fetch_answer` writes them)."""
    if version not in VERSIONS:
        return reference_fetch_answer(correlation_id, version, values)
    flexible = version >= FLEXIBLE
    throttle = values.get("throttle_time", 0)
    topics = values["responses"]
    if version >= 7:
        out = [_TOP_V7.pack(throttle, values["error_code"], values.get("session_id", 0))]
    else:
        out = [I32.pack(throttle)]
    out.append(count(len(topics), flexible))
    for topic in topics:
        out.append(string(topic["topic"], flexible))
        parts = topic["partitions"]
        out.append(count(len(parts), flexible))
        for part in parts:
            if part.get("aborted_transactions") is not None:
                return reference_fetch_answer(correlation_id, version, values)
            _partition(out, part, version, flexible)
        if flexible:
            out.append(b"\0")
    if flexible:
        out.append(b"\0")
    return framed(correlation_id, flexible, out)


def _partition(out: list, part: dict[str, Any], version: int, flexible: bool) -> None:
    """Append partition ``part``'s fields to ``out`` (its records as they are, uncopied)."""
    fixed = (part["partition_index"], part["error_code"], part["high_watermark"],
             part.get("last_stable_offset", -1))
    if version < 5:
        head = _PARTITION_V4.pack(*fixed)
    else:
        head = _PARTITION_V5.pack(*fixed, part.get("log_start_offset", -1))
    head += _NO_ABORTED[flexible]
    if version >= 11:
        head += I32.pack(part.get("preferred_read_replica", -1))
    records = part.get("records")
    out.append(head + nullable_bytes_length(records, flexible))
    if records:
        out.append(records)
    if flexible:
        out.append(b"\0")
