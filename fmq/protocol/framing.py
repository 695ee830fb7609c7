"""Frame splitting: the length prefix, the fixed header, and the incremental parser that
cuts a byte stream into frames. frame.py has the layout and the payload codecs.

This module is the pure-Python reference of ``fmq.protocol._framing_c``, its compiled twin
(the same source compiled by Cython, setup.py): the per-request split on every
connection's receive path. ``fmq.protocol.frame`` chooses one (``fmq.native.choose``).
"""

from __future__ import annotations

import struct
from typing import Protocol

from fmq.errors import ProtocolError

PROTOCOL_VERSION = 1
LENGTH = struct.Struct(">I")
HEADER = struct.Struct(">BBHQ")  # version, opcode, flags, request id
HEADER_SIZE = HEADER.size  # 12: the smallest legal value of the length field
PREFIX_SIZE = LENGTH.size  # 4

_unpack_length = LENGTH.unpack_from
_unpack_header = HEADER.unpack_from

FLAG_RESPONSE = 0x1
FLAG_ERROR = 0x2
KNOWN_FLAGS = FLAG_RESPONSE | FLAG_ERROR

#: Default largest frame (length field value) a peer accepts.
DEFAULT_MAX_FRAME = 64 * 1024 * 1024


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


class Admission(Protocol):
    """A receiver's memory budget, as :meth:`FrameDecoder.feed` asks it
    (:class:`fmq.server.net.request_admission.RequestAdmission` is the server's)."""

    def admit(self, n: int) -> bool:
        """May the frame whose length field ``n`` was just read be received? False: not
        now (feed again, empty data is fine, once it may)."""

    def room(self) -> int:
        """Bytes the next frames of this read may take at once, each admitted exactly as
        :meth:`admit` would admit it (0: ask :meth:`admit` for each)."""

    def took(self, n: int) -> None:
        """The frames admitted against :meth:`room` take their ``n`` bytes."""


class FrameDecoder:
    """Incremental parser: feed received bytes, get whole frames. Raises ProtocolError on a
    bad length (the stream cannot be resynchronised after that: close it).

    ``admission``, when given to :meth:`feed`, admits each frame as soon as its length field
    is known: a receiver with a memory budget refuses (False) until it has room, then feeds
    again (empty data is fine) and admits it. The first frame of a read is asked of
    ``admission.admit``; when more follow in the same read, ``admission.room()`` is asked
    once, the frames that fit in it are counted here and taken together
    (``admission.took``), and any after them are asked of ``admit`` again: a pipelined
    read's frames cost one question, not one each."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()  # an incomplete frame's bytes
        self._wanted = PREFIX_SIZE  # bytes _buf must hold before a frame can complete
        self._head_admitted = False

    def feed(self, data: bytes, admission: Admission | None = None) -> list[Frame]:
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
        max_frame = self.max_frame
        room = -1  # what admission.room() said, less what frames took of it; -1: not asked
        taken = 0  # bytes of frames admitted against room, not yet given to admission.took
        # The length and the header are read from ``src`` in place, and frame_length and
        # parse_frame are called only for a frame they refuse (for their errors): a slice
        # and a call less per length, two views and a call less per frame (most frames
        # arrive several to a read, so this loop is the receive path's per-request cost).
        try:
            while end - pos >= PREFIX_SIZE:
                (n,) = _unpack_length(src, pos)
                if n < HEADER_SIZE or n > max_frame:
                    frame_length(view[pos:pos + PREFIX_SIZE], max_frame)  # raises its error
                if admission is not None and not self._head_admitted:
                    if room < 0 and frames:
                        room = admission.room()
                    if n <= room:
                        room -= n
                        taken += n
                    else:
                        if room > 0:
                            room = 0  # the rest of this read is asked frame by frame
                        if taken:
                            admission.took(taken)
                            taken = 0
                        if not admission.admit(n):
                            break
                    self._head_admitted = True
                start = pos + PREFIX_SIZE
                if end - start < n:
                    incomplete = n
                    break
                self._head_admitted = False
                version, opcode, flags, request_id = _unpack_header(src, start)
                pos = start + n
                if flags & ~KNOWN_FLAGS:
                    parse_frame(view[start:pos])  # raises its error
                frames.append(Frame(version, opcode, flags, request_id,
                                    view[start + HEADER_SIZE:pos]))
        finally:
            if taken:
                admission.took(taken)
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
