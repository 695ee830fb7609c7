"""A PULL's and a COMMIT_OFFSET's request payload read with a length and one ``struct``
call each, for the server's short step (``SessionRequests``): no field dict, no codec walk
of the schema. Each gives what the general decode (``decode_request_payload``) gives for the
same payload, as a tuple in the schema's field order, or None where the general decode
raises (a payload cut short, trailing bytes, a name that is not UTF-8): the short step
then leaves the request to the general way, which answers that error.
``tests/protocol/test_read_requests.py`` compares the two.
"""

from __future__ import annotations

import struct

_U16 = struct.Struct(">H").unpack_from
#: PULL after its topic: queue_id u32, offset u64, max_messages u32, wait_ms u32.
_PULL_REST = struct.Struct(">IQII")
_PULL_REST_SIZE = _PULL_REST.size
_pull_rest = _PULL_REST.unpack_from
#: COMMIT_OFFSET after its group and topic: queue_id u32, next_offset u64.
_COMMIT_REST = struct.Struct(">IQ")
_COMMIT_REST_SIZE = _COMMIT_REST.size
_commit_rest = _COMMIT_REST.unpack_from

#: A PULL's fields: topic, queue_id, offset, max_messages, wait_ms.
PullFields = tuple[str, int, int, int, int]
#: A COMMIT_OFFSET's fields: group, topic, queue_id, next_offset.
CommitOffsetFields = tuple[str, str, int, int]


def plain_pull(payload: bytes | memoryview) -> PullFields | None:
    """A PULL payload's fields, or None where the general decode raises."""
    n = len(payload)
    if n < 2:
        return None
    end = 2 + _U16(payload, 0)[0]
    if n != end + _PULL_REST_SIZE:
        return None
    try:
        topic = str(payload[2:end], "utf-8")
    except UnicodeDecodeError:
        return None
    queue_id, offset, max_messages, wait_ms = _pull_rest(payload, end)
    return topic, queue_id, offset, max_messages, wait_ms


def plain_commit_offset(payload: bytes | memoryview) -> CommitOffsetFields | None:
    """A COMMIT_OFFSET payload's fields, or None where the general decode raises."""
    n = len(payload)
    if n < 2:
        return None
    group_end = 2 + _U16(payload, 0)[0]
    if n < group_end + 2:
        return None
    topic_at = group_end + 2
    topic_end = topic_at + _U16(payload, group_end)[0]
    if n != topic_end + _COMMIT_REST_SIZE:
        return None
    try:
        group = str(payload[2:group_end], "utf-8")
        topic = str(payload[topic_at:topic_end], "utf-8")
    except UnicodeDecodeError:
        return None
    queue_id, next_offset = _commit_rest(payload, topic_end)
    return group, topic, queue_id, next_offset
