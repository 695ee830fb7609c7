"""Frames: the length prefix, the fixed header, and payloads encoded by the schema table.

Frame layout (big-endian)::

    offset  size  field
    0       4     length      u32: bytes that follow this field (12 + payload size)
    4       1     version     protocol version, 1
    5       1     opcode      see schema.Op
    6       2     flags       bit 0 RESPONSE, bit 1 ERROR; other bits 0
    8       8     request_id  u64 chosen by the client, echoed in the response
    16      ...   payload     fields of the opcode's request or response (schema.SCHEMA),
                              or, with ERROR: u16 code, bool retriable, text message

Pure code: bytes in, values out. The server and the client do the I/O. The split of a
byte stream into frames lives in ``framing`` and runs compiled when ``fmq.native`` says so;
this module is its one chooser.
"""

from __future__ import annotations

import struct
from typing import Any

from fmq import native
from fmq.errors import FMQError, ProtocolError
from fmq.protocol import framing
from fmq.protocol.error_fields import make_error
from fmq.protocol.schema import ERROR, SCHEMA, Op
from fmq.protocol.structs import Struct
from fmq.protocol.types import Packed

#: The framing module running: ``framing`` or its compiled twin ``fmq.protocol._framing_c``.
FRAMING = native.choose(framing)
DEFAULT_MAX_FRAME = FRAMING.DEFAULT_MAX_FRAME
FLAG_ERROR = FRAMING.FLAG_ERROR
FLAG_RESPONSE = FRAMING.FLAG_RESPONSE
HEADER = FRAMING.HEADER
HEADER_SIZE = FRAMING.HEADER_SIZE
KNOWN_FLAGS = FRAMING.KNOWN_FLAGS
LENGTH = FRAMING.LENGTH
PREFIX_SIZE = FRAMING.PREFIX_SIZE
PROTOCOL_VERSION = FRAMING.PROTOCOL_VERSION
Frame = FRAMING.Frame
FrameDecoder = FRAMING.FrameDecoder
FrameTooLarge = FRAMING.FrameTooLarge
frame_length = FRAMING.frame_length
parse_frame = FRAMING.parse_frame

ERROR_STRUCT = Struct("error", ERROR)
REQUEST_STRUCTS = {op: Struct(f"{spec.op.name.lower()} request", spec.request)
                   for op, spec in SCHEMA.items()}
RESPONSE_STRUCTS = {op: Struct(f"{spec.op.name.lower()} response", spec.response)
                    for op, spec in SCHEMA.items()}


#: The length prefix and the header in one pack (every answer the server writes).
_PREFIXED_HEADER = struct.Struct(">I" + HEADER.format.lstrip(">"))


def _frame(opcode: int, flags: int, request_id: int, payload: bytearray | bytes) -> bytes:
    return _PREFIXED_HEADER.pack(HEADER_SIZE + len(payload), PROTOCOL_VERSION, opcode, flags,
                                 request_id) + payload


def _spec_struct(table: dict[int, Struct], opcode: int) -> Struct:
    try:
        return table[opcode]
    except KeyError:
        raise ProtocolError(f"unknown opcode {opcode}") from None


def encode_request(opcode: int, request_id: int, fields: dict[str, Any]) -> bytes:
    out = bytearray()
    _spec_struct(REQUEST_STRUCTS, opcode).encode(out, fields)
    return _frame(opcode, 0, request_id, out)


def encode_response(opcode: int, request_id: int, fields: dict[str, Any] | Packed) -> bytes:
    """The answer frame; ``fields`` as the response's field dict, or its payload packed."""
    if type(fields) is Packed:
        return _frame(opcode, FLAG_RESPONSE, request_id, fields.payload)
    out = bytearray()
    _spec_struct(RESPONSE_STRUCTS, opcode).encode(out, fields)
    return _frame(opcode, FLAG_RESPONSE, request_id, out)


def encode_error(opcode: int, request_id: int, error: BaseException) -> bytes:
    """An error response. FMQError subclasses keep their code; anything else is sent as
    the root FMQError (code 1) with its text."""
    if isinstance(error, FMQError):
        code, retriable = type(error).code, type(error).retriable
    else:
        code, retriable = FMQError.code, False
    out = bytearray()
    msg = str(error) or type(error).__name__
    ERROR_STRUCT.encode(out, {"code": code, "retriable": retriable, "message": msg[:65536]})
    # opcode is echoed as-is (it may be one this server does not know) so the client can
    # match the answer; u8 range is guaranteed by the header it came from.
    return _frame(opcode & 0xFF, FLAG_RESPONSE | FLAG_ERROR, request_id, out)


def _decode(st: Struct, payload: bytes | memoryview) -> dict[str, Any]:
    buf = memoryview(payload)
    value, pos = st.decode(buf, 0)
    if pos != len(buf):
        raise ProtocolError(f"{st.name} has {len(buf) - pos} trailing bytes")
    return value


def decode_request(frame: Frame) -> dict[str, Any]:
    return decode_request_payload(frame.opcode, frame.payload)


def decode_request_payload(opcode: int, payload: bytes | memoryview) -> dict[str, Any]:
    """The fields of an ``opcode`` request's payload (every byte of it read)."""
    return _decode(_spec_struct(REQUEST_STRUCTS, opcode), payload)


def decode_response(frame: Frame) -> dict[str, Any]:
    return _decode(_spec_struct(RESPONSE_STRUCTS, frame.opcode), frame.payload)


def decode_error(frame: Frame) -> FMQError:
    """The exception an error response carries, as the same FMQError subclass the server
    raised, with its fields (the root class when the code is unknown to this client)."""
    fields = _decode(ERROR_STRUCT, frame.payload)
    return make_error(fields["code"], fields["message"], fields["retriable"])


__all__ = [
    "DEFAULT_MAX_FRAME", "FLAG_ERROR", "FLAG_RESPONSE", "Frame", "FrameDecoder",
    "FrameTooLarge", "HEADER_SIZE", "Op", "PREFIX_SIZE", "PROTOCOL_VERSION", "decode_error",
    "decode_request", "decode_request_payload", "decode_response", "encode_error",
    "encode_request", "encode_response", "frame_length", "parse_frame",
]
