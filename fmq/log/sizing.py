"""How many log bytes a message's record takes, and the check that it fits in a segment.

These compute the record layout of :mod:`fmq.log.record` from a :class:`fmq.Message`
before it is encoded: the broker reserves segments with them and refuses a message that
no segment could hold.
"""

from __future__ import annotations

from fmq.errors import MessageTooLarge
from fmq.log.record import HEADER_SIZE, properties_length
from fmq.message import Message


def encoded_size(msg: Message, tx_overhead: int = 0) -> int:
    """Bytes the message's record takes in the log (``tx_overhead``: tx id + group)."""
    return (HEADER_SIZE + len(msg.topic.encode()) + len((msg.key or "").encode())
            + len((msg.tags or "").encode()) + properties_length(msg.properties)
            + len(msg.body) + tx_overhead)


def check_fits(msg: Message, segment_size: int, tx_overhead: int = 0) -> None:
    """Raise MessageTooLarge when the message's record cannot fit in one segment (a
    segment always keeps room for its end filler)."""
    if not msg.properties and len(msg.body) + 4 * HEADER_SIZE + 2048 + tx_overhead < segment_size:
        return  # fast path: topic, key and tags are bounded (checked), so it surely fits
    size = encoded_size(msg, tx_overhead)
    if size + HEADER_SIZE > segment_size:
        raise MessageTooLarge(
            f"the message takes {size} bytes in the log with its key, tags and properties; "
            f"a segment holds at most {segment_size - HEADER_SIZE}; shrink it or raise "
            f"segment_size"
        )
