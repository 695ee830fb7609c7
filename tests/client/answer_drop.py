"""A TCP proxy on 127.0.0.1 in front of one server that can swallow the answer to the next
SEND (the server stored the message, the client never hears so): the lost answer a
fail-over leaves behind, made to happen on purpose."""

from __future__ import annotations

import struct
import threading

from fmq.protocol import Op
from tests.frame_proxy import FrameProxy

_HEAD = struct.Struct(">IBBHQ")  # length, version, opcode, flags, request id


class AnswerDropProxy(FrameProxy):
    def __init__(self, upstream: str) -> None:
        self.drop_next_send = threading.Event()
        self.dropped = threading.Event()
        super().__init__(upstream)

    def answer(self, frame: bytes) -> bytes | None:
        opcode = _HEAD.unpack_from(frame)[2]
        if opcode == Op.SEND and self.drop_next_send.is_set():
            self.drop_next_send.clear()
            self.dropped.set()
            return None  # stored on the server; the client never learns it
        return frame
