"""The bytes a record takes, computed from its fields without encoding it: for a
:class:`Record` (does a REF record still fit the active segment?) and for a
:class:`fmq.Message` before it becomes one (reserving segments, refusing a message no
segment could hold)."""

from __future__ import annotations

from fmq.errors import MessageTooLarge
from fmq.log.record.layout import HEADER_SIZE, Record, properties_length
from fmq.message import MAX_NAME, MAX_PROPERTIES, Message

#: A message record's size beyond its body and properties is at most this (topic, key,
#: tags; the transaction fields are added separately). Its properties take at most
#: ``MAX_PROPERTIES`` bytes (both bounds hold once ``check_message`` passed).
RECORD_BOUND = HEADER_SIZE + 127 + 2 * MAX_NAME


def encoded_length(record: Record) -> int:
    """The bytes ``encode(record)`` would take, without encoding it (e.g. whether a REF
    record still fits in the active segment)."""
    return (HEADER_SIZE + len(record.topic.encode()) + len(record.tx_id.encode())
            + len(record.producer_group.encode()) + len((record.key or "").encode())
            + len((record.tags or "").encode()) + properties_length(record.properties)
            + len(record.body))


def encoded_size(msg: Message, tx_overhead: int = 0) -> int:
    """Bytes the message's record takes in the log (``tx_overhead``: tx id + group)."""
    return (HEADER_SIZE + len(msg.topic.encode()) + len((msg.key or "").encode())
            + len((msg.tags or "").encode()) + properties_length(msg.properties)
            + len(msg.body) + tx_overhead)


def check_fits(msg: Message, segment_size: int, tx_overhead: int = 0) -> None:
    """Raise MessageTooLarge when the message's record cannot fit in one segment (a
    segment always keeps room for its end filler). ``msg`` passed ``check_message``."""
    if len(msg.body) + RECORD_BOUND + 2 * HEADER_SIZE + (
            MAX_PROPERTIES if msg.properties else 0) + tx_overhead < segment_size:
        return  # its topic, key, tags and properties are bounded (checked): it surely fits
    size = encoded_size(msg, tx_overhead)
    if size + HEADER_SIZE > segment_size:
        raise MessageTooLarge(
            f"the message takes {size} bytes in the log with its key, tags and properties; "
            f"a segment holds at most {segment_size - HEADER_SIZE}; shrink it or raise "
            f"segment_size"
        )
