"""How many messages fit an answer's byte budget, and the largest answer of one message.

The sizes come from ``fmq.protocol.layout`` (the wire's ``stored_message``): every field
counts, so properties, keys and tags can no more push an answer past its budget than bodies
can. ``tests/server/test_limits.py`` checks them against the encoder.
"""

from __future__ import annotations

from fmq.message import MAX_NAME, MAX_PROPERTIES, StoredMessage
from fmq.protocol.layout import (  # noqa: F401 (the answers' sizes, for the handlers)
    PULL_REPLY_BASE,
    PULL_TAGGED_REPLY_BASE,
    QUERY_REPLY_BASE,
    STORED_MESSAGE_FIXED,
    stored_message_size,
)

_MAX_TOPIC = 127  # bytes: topics are 1-127 ASCII characters


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
    return (PULL_REPLY_BASE + STORED_MESSAGE_FIXED + _MAX_TOPIC + max_message_size + 2 * MAX_NAME
            + MAX_PROPERTIES)
