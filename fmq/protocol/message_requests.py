"""The server's decode of the requests that carry messages (SEND, SEND_BATCH, PREPARE,
SEND_AT): their messages straight into :class:`fmq.message.Message` objects. Every other
request decodes into the wire's field dicts (:func:`fmq.protocol.frame.decode_request`).

A server decodes a message per send: into the ``message`` struct's field dict, then a
``Message`` made from it (:func:`fmq.protocol.values.message_from_wire`). Here that is one
step. The reference below is exactly those two steps, and the pure path runs it; the
compiled twin (``fmq/protocol/_message_requests_c.pyx``) reads the fields in C and hands any
payload it does not take as it is (a length past the end, text that is not UTF-8, trailing
bytes, another buffer type) to the reference, which returns the same value or raises its
error. tests/native/test_message_request_twins.py compares them.

The answer has the wire's field names: ``{"message": Message}`` (SEND; SEND_AT with its
``deliver_at`` and ``delay_ms``), ``{"messages": [Message, ...]}`` (SEND_BATCH; PREPARE
with its ``producer_group`` and ``tx_id``), so the server reads these requests as it reads
any other, their messages as ``Message`` objects.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from fmq import native
from fmq.protocol.frame import Frame, decode_request, decode_request_payload
from fmq.protocol.schema import Op
from fmq.protocol.values import message_from_wire


def reference_decode(opcode: int, payload: bytes | memoryview) -> dict[str, Any]:
    """The request's fields (the wire's decode), its messages made ``Message`` objects."""
    fields = decode_request_payload(opcode, payload)
    if "message" in fields:
        fields["message"] = message_from_wire(fields["message"])
    else:
        fields["messages"] = [message_from_wire(m) for m in fields["messages"]]
    return fields


#: The compiled twin (``_message_requests_c``), or None: the pure path runs the reference.
COMPILED = native.compiled_twin(__name__)
#: The requests that carry messages, and the compiled decoder's method for each.
_METHODS = {Op.SEND: "send", Op.SEND_BATCH: "send_batch", Op.PREPARE: "prepare",
            Op.SEND_AT: "send_at"}


def _decoders() -> dict[int, Callable[[bytes | memoryview], dict[str, Any]]]:
    if COMPILED is not None:
        decoder = COMPILED.MessageDecoder(reference_decode)
        return {op: getattr(decoder, name) for op, name in _METHODS.items()}
    return {op: functools.partial(reference_decode, op) for op in _METHODS}


#: The requests whose messages are decoded into Message objects, by opcode.
MESSAGE_DECODERS = _decoders()


def decode_server_request(frame: Frame) -> dict[str, Any]:
    """The request in ``frame``, as the server runs it: the messages a request carries as
    ``Message`` objects, any other request's fields as :func:`decode_request` gives them."""
    decode = MESSAGE_DECODERS.get(frame.opcode)
    if decode is None:
        return decode_request(frame)
    return decode(frame.payload)
