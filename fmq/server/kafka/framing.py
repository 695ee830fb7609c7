"""Kafka's framing: a 4-byte big-endian size, then the request header (v1, or v2 for the
flexible versions of an API: tagged fields) and the body; answers carry the response header
their schema names (v0, or v1 with tagged fields) before the body."""

from __future__ import annotations

import asyncio
import io
import struct
from dataclasses import dataclass

from kio.serial import entity_reader, entity_writer
from kio.static.protocol import Entity

from fmq.errors import FMQError

SIZE = struct.Struct(">i")
#: The first fields of every request header: api key, api version, correlation id.
FIXED_HEADER = struct.Struct(">hhi")


class FrameError(FMQError):
    """A frame that cannot be a Kafka request (a negative or oversized length, a header
    shorter than its fixed fields): the connection is closed, as Kafka does."""


@dataclass(frozen=True)
class RequestHead:
    """The fixed part of a request header, readable before the API is known."""

    api_key: int
    api_version: int
    correlation_id: int


async def read_size(reader: asyncio.StreamReader, max_size: int) -> int | None:
    """The next frame's size, or None at a clean end of stream. Raises FrameError for a
    size below the fixed header or above ``max_size`` (nothing of the frame is read: a
    hostile length allocates nothing)."""
    try:
        prefix = await reader.readexactly(SIZE.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise FrameError("the connection closed inside a frame's size") from None
        return None
    (size,) = SIZE.unpack(prefix)
    if size < FIXED_HEADER.size:
        raise FrameError(f"frame size {size} is below the {FIXED_HEADER.size} bytes of a "
                         f"request header")
    if size > max_size:
        raise FrameError(f"frame of {size} bytes is over the limit of {max_size} "
                         f"(max_frame_size)")
    return size


async def read_body(reader: asyncio.StreamReader, size: int) -> bytes:
    """The ``size`` bytes of a frame after its size."""
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise FrameError(f"the connection closed inside a frame of {size} bytes") from None


def read_head(frame: bytes) -> RequestHead:
    return RequestHead(*FIXED_HEADER.unpack_from(frame, 0))


def read_request(frame: bytes, request_type: type[Entity]) -> Entity:
    """The request entity of ``frame`` (its header read by the header schema of
    ``request_type``). Raises kio's errors for bytes that do not match the schema. Bytes
    after the body are ignored, as Kafka does: librdkafka's Metadata v12 sends three."""
    header_type = request_type.__header_schema__
    _header, header_size = entity_reader(header_type)(frame, 0)
    request, _ = entity_reader(request_type)(frame, header_size)
    return request


def encode_response(correlation_id: int, response: Entity) -> bytes:
    """``response`` framed: size, its response header, its body."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header_type = response.__header_schema__
    entity_writer(header_type)(out, header_type(correlation_id=correlation_id))
    entity_writer(type(response))(out, response)
    data = out.getbuffer()
    SIZE.pack_into(data, 0, len(data) - SIZE.size)
    del data
    return out.getvalue()


def encode_bare_error(correlation_id: int, error_code: int) -> bytes:
    """A response header v0 and a lone error code: the answer to an API this server does
    not know, whose response layout it cannot know either (Kafka's own error responses
    begin with the error code for ApiVersions, the one API every client reads so)."""
    return SIZE.pack(6) + struct.pack(">ih", correlation_id, error_code)
