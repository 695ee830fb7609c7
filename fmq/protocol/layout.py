"""Sizes and fixed formats of encoded values, derived from the schema's field types.

The wire's layout is written once, in ``schema.py`` (fields) and ``types.py`` (how each
type is encoded). Code that must know a size without encoding (a server fitting messages
into an answer's byte budget, a batching client filling a frame) or that reads a fixed-size
record in one ``struct`` call asks this module, so a changed field changes them too.
"""

from __future__ import annotations

import struct

from fmq.message import StoredMessage
from fmq.protocol.frame import HEADER_SIZE, PREFIX_SIZE
from fmq.protocol.schema import SCHEMA, SEND_RESULT, STORED_MESSAGE, Op
from fmq.protocol.structs import Struct
from fmq.protocol.types import (
    STR,
    BoolField,
    BytesField,
    FieldType,
    IntField,
    ListOf,
    PropsField,
    StrField,
)


def fixed_size(ftype: FieldType) -> int:
    """Bytes a field takes whatever its value: an integer's, or the count or length
    before a string's, bytes', list's or properties' content."""
    if isinstance(ftype, (IntField, StrField)):
        return ftype.st.size
    if isinstance(ftype, (BytesField, ListOf)):
        return 4
    if isinstance(ftype, PropsField):
        return 2
    if isinstance(ftype, BoolField):
        return 1
    if isinstance(ftype, Struct):
        return sum(fixed_size(t) for _n, t in ftype.fields)
    raise ValueError(f"{ftype.name} has no fixed size")


def fixed_format(st: Struct) -> struct.Struct:
    """One ``struct`` format for a struct made of integers only (its whole encoding)."""
    if not all(isinstance(t, IntField) for _n, t in st.fields):
        raise ValueError(f"{st.name} holds more than integers")
    return struct.Struct(">" + "".join(t.st.format.lstrip(">") for _n, t in st.fields))


def _frame_base(fields: list[tuple[str, FieldType]]) -> int:
    return PREFIX_SIZE + HEADER_SIZE + sum(fixed_size(t) for _n, t in fields)


#: A PULL answer without messages: length prefix, header, list count, min and next offset.
PULL_REPLY_BASE = _frame_base(SCHEMA[Op.PULL].response)
#: A PULL_TAGGED answer without messages: a PULL answer's and the resume offset.
PULL_TAGGED_REPLY_BASE = _frame_base(SCHEMA[Op.PULL_TAGGED].response)
#: A QUERY_KEY answer without messages: length prefix, header, list count.
QUERY_REPLY_BASE = _frame_base(SCHEMA[Op.QUERY_KEY].response)
#: Bytes a SEND_BATCH frame adds to its encoded messages: length prefix, header, count.
BATCH_FRAME_OVERHEAD = _frame_base(SCHEMA[Op.SEND_BATCH].request)
#: A send_result, read with one ``struct`` call.
SEND_RESULT_FORMAT = fixed_format(SEND_RESULT)
#: The fixed-size fields of a stored_message: lengths, counts, integers.
STORED_MESSAGE_FIXED = fixed_size(STORED_MESSAGE)
#: A property's fixed bytes: its key's and its value's length.
PROPERTY_FIXED = 2 * fixed_size(STR)


def stored_message_size(m: StoredMessage) -> int:
    """Bytes ``m`` takes in an answer (docs/protocol.md, ``stored_message``)."""
    size = STORED_MESSAGE_FIXED + len(m.topic.encode()) + len(m.body)
    if m.key is not None:
        size += len(m.key.encode())
    if m.tags is not None:
        size += len(m.tags.encode())
    for k, v in m.properties.items():
        size += PROPERTY_FIXED + len(k.encode()) + len(v.encode())
    return size
