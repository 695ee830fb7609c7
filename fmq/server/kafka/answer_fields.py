"""The wire fields the door's own answer writers put together (``produce_answer``,
``fetch_answer``): Kafka's primitive encodings, in their classic form and in the flexible
versions' compact one, and the frame around a body. Written as kio writes them (tests/kafka
holds each writer equal to kio's bytes)."""

from __future__ import annotations

import struct

#: A field's bytes as the writers take them.
Buffer = bytes | bytearray

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
#: The frame's size and the response header's correlation id.
_HEAD = struct.Struct(">ii")


def uvarint(value: int) -> bytes:
    """An unsigned varint (the flexible versions' lengths and tag counts)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def count(n: int, flexible: bool) -> bytes:
    """An array's length: int32, or in a flexible version an unsigned varint of n + 1."""
    return uvarint(n + 1) if flexible else I32.pack(n)


def string(text: str, flexible: bool) -> bytes:
    data = text.encode()
    return (uvarint(len(data) + 1) if flexible else I16.pack(len(data))) + data


def nullable_string(text: str | None, flexible: bool) -> bytes:
    if text is None:
        return b"\0" if flexible else b"\xff\xff"
    return string(text, flexible)


def nullable_bytes_length(data: Buffer | None, flexible: bool) -> bytes:
    """The length field of a nullable bytes field (the bytes themselves follow it)."""
    if data is None:
        return b"\0" if flexible else b"\xff\xff\xff\xff"
    n = len(data)
    return uvarint(n + 1) if flexible else I32.pack(n)


def framed(correlation_id: int, flexible: bool, body: list[Buffer]) -> bytes:
    """The answer's frame: its size, the response header (v1 in a flexible version: an
    empty tagged-field section after the correlation id), then ``body``'s parts, joined
    in one copy."""
    header = b"\0" if flexible else b""
    size = 4 + len(header) + sum(len(part) for part in body)
    return b"".join([_HEAD.pack(size, correlation_id), header, *body])
