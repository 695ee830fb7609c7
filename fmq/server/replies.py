"""Sizes of PULL and QUERY_KEY answers, exact to the byte, and how many messages fit a
byte budget.

The sizes follow the wire encoding in docs/protocol.md (``stored_message``): every field
counts, so properties, keys and tags can no more push an answer past its budget than bodies
can. ``tests/server/test_limits.py`` checks them against the encoder.
"""

from __future__ import annotations

from fmq.message import MAX_NAME, MAX_PROPERTIES, StoredMessage
from fmq.protocol import HEADER_SIZE, PREFIX_SIZE

#: A PULL answer without messages: length prefix, header, list count, min and next offset.
PULL_REPLY_BASE = PREFIX_SIZE + HEADER_SIZE + 4 + 8 + 8
#: A PULL_TAGGED answer without messages: a PULL answer's and the resume offset.
PULL_TAGGED_REPLY_BASE = PULL_REPLY_BASE + 8
#: A QUERY_KEY answer without messages: length prefix, header, list count.
QUERY_REPLY_BASE = PREFIX_SIZE + HEADER_SIZE + 4
#: The fixed-size fields of a stored_message: str/optstr lengths (2 each: topic, key, tags),
#: queue_id 4, queue_offset 8, offset 8, body length 4, properties count 2, store_time 8.
_FIXED = 2 + 4 + 8 + 8 + 4 + 2 + 2 + 2 + 8
_MAX_TOPIC = 127  # bytes: topics are 1-127 ASCII characters


def stored_message_size(m: StoredMessage) -> int:
    """Bytes ``m`` takes in an answer (docs/protocol.md, ``stored_message``)."""
    size = _FIXED + len(m.topic.encode()) + len(m.body)
    if m.key is not None:
        size += len(m.key.encode())
    if m.tags is not None:
        size += len(m.tags.encode())
    for k, v in m.properties.items():
        size += 4 + len(k.encode()) + len(v.encode())
    return size


def fit(msgs: list[StoredMessage], budget: int) -> tuple[list[StoredMessage], int]:
    """The leading messages whose sizes add up to at most ``budget`` (at least the first
    one, whatever its size), and their total size."""
    total = 0
    for i, m in enumerate(msgs):
        size = stored_message_size(m)
        if i and total + size > budget:
            return msgs[:i], total
        total += size
    return msgs, total


def largest_single_reply(max_message_size: int) -> int:
    """Bytes of the largest answer carrying one message of at most ``max_message_size``
    bytes (properties at their limit, the longest topic, key and tags)."""
    return (PULL_REPLY_BASE + _FIXED + _MAX_TOPIC + max_message_size + 2 * MAX_NAME
            + MAX_PROPERTIES)
