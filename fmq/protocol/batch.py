"""SEND_BATCH for a batching client: each message encoded once, the frame joined from them.

The bytes are exactly those :func:`fmq.protocol.encode_request` writes for SEND_BATCH (the
wire format is the schema's; ``tests/protocol/test_message_twins.py`` compares the two). What
differs is the cost: the common message (no properties, text key and tags) is packed by
precompiled ``struct`` calls into one ``bytes`` object when it is handed over, so a batch
is a ``bytes.join`` of finished parts and no field dict is built per message. Anything
else (properties, bad types, oversized fields) goes through the schema's generic encoder,
which also gives the same errors as a synchronous send.

An idempotent producer's message carries its producer id and sequence number as properties
(:func:`idempotence_properties`); without other properties it keeps the fast path, its
properties packed from bytes made once per producer.

The SEND_BATCH answer is a fixed-size record per message, so it is read with
``struct.iter_unpack`` (its format from ``fmq.protocol.layout``) instead of the generic
decoder. ``tests/protocol/test_message_twins.py`` runs the same cases against each fast
path here and the schema's codec it stands in for.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import Any

from fmq.errors import ProtocolError
from fmq.message import PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY, Message, SendResult
from fmq.protocol.frame import HEADER, LENGTH, PROTOCOL_VERSION, Frame
from fmq.protocol.layout import BATCH_FRAME_OVERHEAD, SEND_RESULT_FORMAT
from fmq.protocol.schema import MESSAGE, Op
from fmq.protocol.values import BROKER_PICKS_QUEUE, message_to_wire

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_NULL_STR = b"\xff\xff"
#: Empty properties (u16 count 0) and the queue id, the tail of every fast-path message.
_TAIL = struct.Struct(">Hi")
_I32 = struct.Struct(">i")
_RESULT = SEND_RESULT_FORMAT
_MAX_STR = 0xFFFE  # an optional str of 0xFFFF bytes would read as null: the generic path refuses
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1

__all__ = ["BATCH_FRAME_OVERHEAD", "decode_send_results", "encode_message",
           "idempotence_properties", "send_batch_frame"]


def _generic(topic: Any, body: Any, key: Any, tags: Any, properties: Any,
             queue_id: Any, idempotence: tuple[str, int] | None = None) -> bytes:
    if idempotence is not None:
        properties = idempotence_properties(properties, *idempotence)
    out = bytearray()
    MESSAGE.encode(out, message_to_wire(Message(topic, body, key, tags, properties, queue_id)))
    return bytes(out)


def _opt_str(value: str | None) -> bytes | None:
    """The encoded optional string, or None when the fast path cannot take it."""
    if not value:  # None and "" both travel as null, as message_to_wire does
        return _NULL_STR
    raw = value.encode("utf-8")
    if len(raw) > _MAX_STR:
        return None
    return _U16.pack(len(raw)) + raw


def idempotence_properties(properties: dict[str, str] | None, producer_id: str,
                           sequence: int) -> dict[str, str]:
    """``properties`` with an idempotent producer's id and the message's sequence added."""
    return {**(properties or {}), PRODUCER_ID_PROPERTY: producer_id,
            SEQUENCE_PROPERTY: str(sequence)}


@lru_cache(maxsize=64)
def _idempotence_head(producer_id: str) -> bytes:
    """The encoded properties of an idempotent message up to its sequence's value."""
    out = bytearray(_U16.pack(2))
    for text in (PRODUCER_ID_PROPERTY, producer_id, SEQUENCE_PROPERTY):
        raw = text.encode("utf-8")
        out += _U16.pack(len(raw)) + raw
    return bytes(out)


def encode_message(topic: str, body: bytes, key: str | None = None, tags: str | None = None,
                   properties: dict[str, str] | None = None,
                   queue_id: int | None = None,
                   idempotence: tuple[str, int] | None = None) -> bytes:
    """One ``message`` of SEND_BATCH (or SEND) as bytes; ``idempotence``: the producer id
    and sequence number to add to its properties. Raises what a synchronous send raises
    for a value the wire cannot carry (InvalidArgument, ProtocolError)."""
    if idempotence is not None and (properties or len(idempotence[0]) > 255):
        properties = idempotence_properties(properties, *idempotence)
        idempotence = None
    if (type(topic) is not str or type(body) is not bytes or properties
            or (key is not None and type(key) is not str)
            or (tags is not None and type(tags) is not str)
            or (queue_id is not None and (type(queue_id) is not int
                                          or not _I32_MIN <= queue_id <= _I32_MAX))):
        return _generic(topic, body, key, tags, properties, queue_id, idempotence)
    raw_topic = topic.encode("utf-8")
    raw_key = _opt_str(key)
    raw_tags = _opt_str(tags)
    if len(raw_topic) > 0xFFFF or raw_key is None or raw_tags is None:
        return _generic(topic, body, key, tags, properties, queue_id, idempotence)
    qid = BROKER_PICKS_QUEUE if queue_id is None else queue_id
    if idempotence is not None:
        seq = str(idempotence[1]).encode()
        tail = b"".join((_idempotence_head(idempotence[0]), _U16.pack(len(seq)), seq,
                         _I32.pack(qid)))
    else:
        tail = _TAIL.pack(0, qid)
    return b"".join((_U16.pack(len(raw_topic)), raw_topic, _U32.pack(len(body)), body,
                     raw_key, raw_tags, tail))


def send_batch_frame(request_id: int, messages: list[bytes], size: int) -> bytes:
    """The whole SEND_BATCH request frame; ``size`` is the sum of the messages' lengths."""
    head = (LENGTH.pack(BATCH_FRAME_OVERHEAD - LENGTH.size + size)
            + HEADER.pack(PROTOCOL_VERSION, Op.SEND_BATCH, 0, request_id)
            + _U32.pack(len(messages)))
    return head + b"".join(messages)


def decode_send_results(frame: Frame) -> list[SendResult]:
    """The ``results`` of a SEND_BATCH answer, in the order of the request's messages."""
    payload = memoryview(frame.payload)
    if len(payload) < _U32.size:
        raise ProtocolError("SEND_BATCH answer is shorter than its result count")
    (count,) = _U32.unpack_from(payload, 0)
    if len(payload) != _U32.size + count * _RESULT.size:
        raise ProtocolError(f"SEND_BATCH answer of {len(payload)} bytes does not hold "
                            f"{count} results of {_RESULT.size} bytes")
    return [SendResult(*fields) for fields in _RESULT.iter_unpack(payload[_U32.size:])]
