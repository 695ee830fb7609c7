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

The plain decode (:func:`plain_send_reference`, the compiled ``MessageDecoder.plain_send``;
a SEND_BATCH's alike, every message plain) serves the session's short step
(:mod:`fmq.server.net.session_requests`): a SEND's message when it surely passes
:func:`fmq.message.check_message` (its own checks: topic name, body size, key, tags,
properties, no queue id), else None, and the session runs the request the general way,
which decodes it again and raises whatever error it has.

The answer has the wire's field names: ``{"message": Message}`` (SEND; SEND_AT with its
``deliver_at`` and ``delay_ms``), ``{"messages": [Message, ...]}`` (SEND_BATCH; PREPARE
with its ``producer_group`` and ``tx_id``), so the server reads these requests as it reads
any other, their messages as ``Message`` objects.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any

from fmq import native
from fmq.errors import ProtocolError
from fmq.message import (
    INTERNAL_TOPIC_PREFIX,
    MAX_NAME,
    Message,
    plain_properties,
    valid_topic_name,
)
from fmq.protocol.frame import Frame, decode_request, decode_request_payload
from fmq.protocol.schema import Op
from fmq.protocol.types import NULL16
from fmq.protocol.values import message_from_wire


def reference_decode(opcode: int, payload: bytes | memoryview) -> dict[str, Any]:
    """The request's fields (the wire's decode), its messages made ``Message`` objects."""
    fields = decode_request_payload(opcode, payload)
    if "message" in fields:
        fields["message"] = message_from_wire(fields["message"])
    else:
        fields["messages"] = [message_from_wire(m) for m in fields["messages"]]
    return fields


def plain_send_reference(payload: bytes | memoryview, max_size: int) -> Message | None:
    """The message of a SEND ``payload``, when it surely passes ``check_message`` with a
    body of at most ``max_size`` bytes: a topic name that is not internal, plain labels and
    properties, no queue id (the broker picks). Else None: the request runs the general
    way, which decodes it again and gets the error, if any."""
    try:
        message = reference_decode(Op.SEND, payload)["message"]
    except ProtocolError:
        return None
    return message if plain_message(message, max_size) else None


def plain_send_batch_reference(payload: bytes | memoryview, max_size: int
                               ) -> list[Message] | None:
    """The messages of a SEND_BATCH ``payload`` when there is at least one and each is
    plain (as :func:`plain_send_reference` has it), else None."""
    try:
        messages = reference_decode(Op.SEND_BATCH, payload)["messages"]
    except ProtocolError:
        return None
    if messages and all(plain_message(m, max_size) for m in messages):
        return messages
    return None


def plain_message(m: Message, max_size: int) -> bool:
    """Whether the decoded message ``m`` surely passes ``check_message(m, max_size, _)``
    (the checks that do not depend on the topic's settings)."""
    return (valid_topic_name(m.topic) and not m.topic.startswith(INTERNAL_TOPIC_PREFIX)
            and len(m.body) <= max_size and _plain_label(m.key) and _plain_label(m.tags)
            and (m.properties is None or plain_properties(m.properties))
            and m.queue_id is None)


def _plain_label(value: str | None) -> bool:
    # check_label's rules (a decoded label is a str): "" counts as no value.
    return value is None or ("\x00" not in value and len(value.encode()) <= MAX_NAME)


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
#: The compiled decoder the plain decodes are methods of (None: the references run).
_PLAIN = COMPILED.MessageDecoder(reference_decode) if COMPILED is not None else None
#: ``plain_send(payload, max_size)``: :func:`plain_send_reference` or its compiled twin.
PLAIN_SEND: Callable[[bytes | memoryview, int], Message | None] = (
    plain_send_reference if _PLAIN is None else _PLAIN.plain_send)
#: ``plain_send_batch(payload, max_size)``: :func:`plain_send_batch_reference` or its twin.
PLAIN_SEND_BATCH: Callable[[bytes | memoryview, int], list[Message] | None] = (
    plain_send_batch_reference if _PLAIN is None else _PLAIN.plain_send_batch)


def decode_server_request(frame: Frame) -> dict[str, Any]:
    """The request in ``frame``, as the server runs it: the messages a request carries as
    ``Message`` objects, any other request's fields as :func:`decode_request` gives them."""
    decode = MESSAGE_DECODERS.get(frame.opcode)
    if decode is None:
        return decode_request(frame)
    return decode(frame.payload)


_U16 = struct.Struct(">H").unpack_from


def _tx_names(payload: bytes | memoryview, optional_id: bool
              ) -> tuple[str, str | None, int] | None:
    """A transaction request's ``producer_group`` (str) and ``tx_id`` (optstr for PREPARE,
    ``optional_id``; str for COMMIT) at the start of ``payload``, and where they end; None
    for anything the wire's decode would refuse there (cut short, not UTF-8)."""
    end = len(payload)
    if end < 4:
        return None
    pos = 2 + _U16(payload, 0)[0]
    if pos + 2 > end:
        return None
    try:
        group = str(payload[2:pos], "utf-8")
    except UnicodeDecodeError:
        return None
    n = _U16(payload, pos)[0]
    pos += 2
    if n == NULL16 and optional_id:
        return group, None, pos
    if pos + n > end:
        return None
    try:
        tx_id = str(payload[pos:pos + n], "utf-8")
    except UnicodeDecodeError:
        return None
    return group, tx_id, pos + n


def plain_prepare(payload: bytes | memoryview, max_size: int
                  ) -> tuple[str, str | None, list[Message]] | None:
    """A PREPARE ``payload``'s producer group, transaction id (None: the broker makes one)
    and messages, when the wire's decode takes it and each message is plain (as
    :func:`plain_send_reference` has it; at least one): the session's short step for a
    PREPARE. Else None: the request runs the general way, which decodes it again and gets
    the error, if any. Its messages are a SEND_BATCH's list, read by ``PLAIN_SEND_BATCH``
    (compiled where the twins are), so the two paths share the reference's rules."""
    names = _tx_names(payload, True)
    if names is None:
        return None
    group, tx_id, pos = names
    rest = payload[pos:] if type(payload) is memoryview else memoryview(payload)[pos:]
    messages = PLAIN_SEND_BATCH(rest, max_size)
    if messages is None:
        return None
    return group, tx_id, messages


def plain_commit(payload: bytes | memoryview) -> tuple[str, str] | None:
    """A COMMIT ``payload``'s producer group and transaction id when the wire's decode
    takes it (nothing after them), else None (the general way gives the error)."""
    names = _tx_names(payload, False)
    if names is None or names[2] != len(payload):
        return None
    return names[0], names[1]
