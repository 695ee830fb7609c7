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

Pure code: bytes in, values out. The server and the client do the I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from fmq.errors import FMQError, ProtocolError
from fmq.protocol.error_fields import make_error
from fmq.protocol.schema import ERROR, SCHEMA, Op
from fmq.protocol.structs import Struct

PROTOCOL_VERSION = 1
LENGTH = struct.Struct(">I")
HEADER = struct.Struct(">BBHQ")  # version, opcode, flags, request id
HEADER_SIZE = HEADER.size  # 12: the smallest legal value of the length field
PREFIX_SIZE = LENGTH.size  # 4

FLAG_RESPONSE = 0x1
FLAG_ERROR = 0x2
KNOWN_FLAGS = FLAG_RESPONSE | FLAG_ERROR

#: Default largest frame (length field value) a peer accepts.
DEFAULT_MAX_FRAME = 64 * 1024 * 1024

ERROR_STRUCT = Struct("error", ERROR)
REQUEST_STRUCTS = {op: Struct(f"{spec.op.name.lower()} request", spec.request)
                   for op, spec in SCHEMA.items()}
RESPONSE_STRUCTS = {op: Struct(f"{spec.op.name.lower()} response", spec.response)
                    for op, spec in SCHEMA.items()}


class Frame:
    """One received frame: the header's fields and the payload (a view of the received
    bytes, valid while the frame is referenced)."""

    __slots__ = ("version", "opcode", "flags", "request_id", "payload")

    def __init__(self, version: int, opcode: int, flags: int, request_id: int,
                 payload: bytes | memoryview) -> None:
        self.version = version
        self.opcode = opcode
        self.flags = flags
        self.request_id = request_id
        self.payload = payload

    @property
    def is_response(self) -> bool:
        return bool(self.flags & FLAG_RESPONSE)

    @property
    def is_error(self) -> bool:
        return bool(self.flags & FLAG_ERROR)

    def __repr__(self) -> str:
        return (f"Frame(version={self.version}, opcode={self.opcode}, flags={self.flags}, "
                f"request_id={self.request_id}, payload={len(self.payload)} bytes)")


class FrameTooLarge(ProtocolError):
    """The length field announces more than the receiver accepts (its max frame size)."""


def frame_length(prefix: bytes | memoryview, max_frame: int) -> int:
    """The length field of a frame (bytes that follow the prefix), checked against
    ``max_frame`` and the header size before anything is read or allocated."""
    (n,) = LENGTH.unpack_from(prefix, 0)
    if n < HEADER_SIZE:
        raise ProtocolError(f"frame length {n} is shorter than the {HEADER_SIZE}-byte header")
    if n > max_frame:
        # The frame may hold one message or a batch: say what to do about each. A single
        # message this large is over max_message_size too (that limit stays below this).
        raise FrameTooLarge(f"frame of {n} bytes exceeds the limit of {max_frame} bytes "
                            f"(max_frame_size): a single message must fit max_message_size, "
                            f"so send a smaller body; a batch must be split into smaller "
                            f"batches")
    return n


def parse_frame(body: bytes | memoryview) -> Frame:
    """Split the bytes after the length prefix into header fields and payload."""
    if len(body) < HEADER_SIZE:
        raise ProtocolError(f"frame of {len(body)} bytes is shorter than the header")
    version, opcode, flags, request_id = HEADER.unpack_from(body, 0)
    if flags & ~KNOWN_FLAGS:
        raise ProtocolError(f"unknown frame flags 0x{flags:04x}")
    return Frame(version, opcode, flags, request_id, memoryview(body)[HEADER_SIZE:])


def _frame(opcode: int, flags: int, request_id: int, payload: bytearray) -> bytes:
    head = LENGTH.pack(HEADER_SIZE + len(payload)) + HEADER.pack(
        PROTOCOL_VERSION, opcode, flags, request_id)
    return head + payload


def _spec_struct(table: dict[int, Struct], opcode: int) -> Struct:
    try:
        return table[opcode]
    except KeyError:
        raise ProtocolError(f"unknown opcode {opcode}") from None


def encode_request(opcode: int, request_id: int, fields: dict[str, Any]) -> bytes:
    out = bytearray()
    _spec_struct(REQUEST_STRUCTS, opcode).encode(out, fields)
    return _frame(opcode, 0, request_id, out)


def encode_response(opcode: int, request_id: int, fields: dict[str, Any]) -> bytes:
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
    return _decode(_spec_struct(REQUEST_STRUCTS, frame.opcode), frame.payload)


def decode_response(frame: Frame) -> dict[str, Any]:
    return _decode(_spec_struct(RESPONSE_STRUCTS, frame.opcode), frame.payload)


def decode_error(frame: Frame) -> FMQError:
    """The exception an error response carries, as the same FMQError subclass the server
    raised, with its fields (the root class when the code is unknown to this client)."""
    fields = _decode(ERROR_STRUCT, frame.payload)
    return make_error(fields["code"], fields["message"], fields["retriable"])


class FrameDecoder:
    """Incremental parser: feed received bytes, get whole frames. Raises ProtocolError on a
    bad length (the stream cannot be resynchronised after that: close it).

    ``admit``, when given to :meth:`feed`, is asked once per frame, with the frame's length
    field, as soon as that is known: a receiver with a memory budget refuses (False) until it
    has room, then feeds again (empty data is fine) and admits it."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()  # an incomplete frame's bytes
        self._wanted = PREFIX_SIZE  # bytes _buf must hold before a frame can complete
        self._head_admitted = False

    def feed(self, data: bytes, admit: Callable[[int], bool] | None = None) -> list[Frame]:
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._wanted:  # a large frame arriving in pieces: no copy yet
                return []
            src = bytes(buf)
            buf.clear()
        else:
            # Frames are parsed in place: their payloads are views of these bytes (one
            # copy less per request), so they must not change under us.
            src = data if type(data) is bytes else bytes(data)
        view = memoryview(src)
        end = len(src)
        frames = []
        pos = 0
        incomplete = 0  # the length of a frame whose bytes have not all arrived
        while end - pos >= PREFIX_SIZE:
            n = frame_length(view[pos:pos + PREFIX_SIZE], self.max_frame)
            if admit is not None and not self._head_admitted:
                if not admit(n):
                    break
                self._head_admitted = True
            start = pos + PREFIX_SIZE
            if end - start < n:
                incomplete = n
                break
            self._head_admitted = False
            frames.append(parse_frame(view[start:start + n]))
            pos = start + n
        if pos < end:
            self._buf += view[pos:]
            self._wanted = PREFIX_SIZE + incomplete if incomplete else PREFIX_SIZE
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def discard(self) -> int:
        """Drop the bytes of an incomplete frame (nobody will send the rest: its connection
        ended); returns how many there were. A new, empty buffer takes the old one's place,
        so its memory is freed now, whoever still refers to this decoder."""
        dropped = len(self._buf)
        self._buf = bytearray()
        self._wanted = PREFIX_SIZE
        self._head_admitted = False
        return dropped


__all__ = [
    "DEFAULT_MAX_FRAME", "FLAG_ERROR", "FLAG_RESPONSE", "Frame", "FrameDecoder",
    "FrameTooLarge", "HEADER_SIZE", "Op", "PREFIX_SIZE", "PROTOCOL_VERSION", "decode_error",
    "decode_request", "decode_response", "encode_error", "encode_request", "encode_response",
    "frame_length", "parse_frame",
]
