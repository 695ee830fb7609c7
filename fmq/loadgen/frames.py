"""Request frames for the load generator, encoded once and reused.

A request frame differs between two requests only in its request id (bytes 8..16, see
docs/protocol.md), so the payload of a SEND or SEND_BATCH of a given body size is encoded
once and each request is the cached head, the new id and the cached tail: no schema walk,
no body copy beyond the one ``bytes`` join per request.
"""

from __future__ import annotations

import struct
from typing import Any

from fmq.protocol import Op, encode_request

_RID = struct.Struct(">Q")
_RID_AT = 8  # 4-byte length prefix, version, opcode, 2 flag bytes


class FrameTemplate:
    """One encoded request whose request id is patched per use."""

    __slots__ = ("_head", "_tail", "size")

    def __init__(self, op: Op, fields: dict[str, Any]) -> None:
        frame = encode_request(op, 0, fields)
        self._head = frame[:_RID_AT]
        self._tail = frame[_RID_AT + _RID.size:]
        self.size = len(frame)

    def with_id(self, request_id: int) -> bytes:
        return self._head + _RID.pack(request_id) + self._tail


def bench_message(topic: str, size: int) -> dict[str, Any]:
    """The wire fields of one benchmark message: ``size`` bytes of body, no key, the
    broker chooses the queue."""
    return {"topic": topic, "body": b"x" * size, "key": None, "tags": None,
            "properties": {}, "queue_id": -1}


def send_template(topic: str, size: int) -> FrameTemplate:
    return FrameTemplate(Op.SEND, {"message": bench_message(topic, size)})


def send_batch_template(topic: str, size: int, count: int) -> FrameTemplate:
    return FrameTemplate(Op.SEND_BATCH, {"messages": [bench_message(topic, size)] * count})


def prepare_template(topic: str, size: int, producer_group: str) -> FrameTemplate:
    return FrameTemplate(Op.PREPARE, {"producer_group": producer_group, "tx_id": None,
                                      "messages": [bench_message(topic, size)]})
