"""The server's decode of the two send requests, SEND and SEND_BATCH, straight into
:class:`fmq.message.Message` objects; every other request decodes into field dicts
(:func:`fmq.protocol.frame.decode_request`).

A server decodes a message per send: into the ``message`` struct's field dict, then a
``Message`` made from it (:func:`fmq.protocol.values.message_from_wire`). Here that is one
step. The reference below is exactly those two steps, and the pure path runs it; the
compiled twin (``fmq/protocol/_send_requests_c.pyx``) reads the fields in C into the
``Message`` and hands any payload it does not take as it is (a length past the end, text
that is not UTF-8, trailing bytes, another buffer type) to the reference, which returns the
same value or raises its error. tests/native/test_send_request_twins.py compares them.

SEND answers ``{"message": Message}``, SEND_BATCH ``{"messages": [Message, ...]}``: the keys
of the wire's fields, so the server reads a send request as it reads any other.
"""

from __future__ import annotations

from typing import Any

from fmq import native
from fmq.protocol.frame import Frame, decode_request, decode_request_payload
from fmq.protocol.schema import Op
from fmq.protocol.values import message_from_wire


def reference_send(payload: bytes | memoryview) -> dict[str, Any]:
    """SEND's payload: ``{"message": Message}`` (the wire's decode, then the Message)."""
    return {"message": message_from_wire(decode_request_payload(Op.SEND, payload)["message"])}


def reference_send_batch(payload: bytes | memoryview) -> dict[str, Any]:
    """SEND_BATCH's payload: ``{"messages": [Message, ...]}``."""
    return {"messages": [message_from_wire(m) for m in
                         decode_request_payload(Op.SEND_BATCH, payload)["messages"]]}


#: The compiled twin (``_send_requests_c``), or None: the pure path runs the references.
COMPILED = native.load("fmq.protocol._send_requests_c")
if COMPILED is not None:
    _decoder = COMPILED.SendDecoder(reference_send, reference_send_batch)
    decode_send, decode_send_batch = _decoder.send, _decoder.send_batch
else:
    decode_send, decode_send_batch = reference_send, reference_send_batch

#: The requests decoded into Messages here, by opcode.
SEND_DECODERS = {Op.SEND: decode_send, Op.SEND_BATCH: decode_send_batch}


def decode_server_request(frame: Frame) -> dict[str, Any]:
    """The request in ``frame``, as the server runs it: a send's messages as ``Message``
    objects, any other request's fields as decoded by :func:`decode_request`."""
    decode = SEND_DECODERS.get(frame.opcode)
    if decode is None:
        return decode_request(frame)
    return decode(frame.payload)
