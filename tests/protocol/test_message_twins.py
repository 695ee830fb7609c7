"""The wire's hand-written fast paths and the schema's codec they stand in for, each pair run
on one set of cases: the batching client's one-message encoder, its SEND_BATCH answer
reader, and the size of a stored message in an answer (``fmq.protocol.layout``); and the
batch frame joined from fast-path messages is the schema's SEND_BATCH request."""

from __future__ import annotations

import struct

import pytest

from fmq.errors import InvalidArgument, ProtocolError
from fmq.message import Message, SendResult, StoredMessage
from fmq.protocol import (
    FLAG_RESPONSE,
    Op,
    decode_response,
    encode_request,
    encode_response,
    parse_frame,
)
from fmq.protocol.batch import (
    decode_send_results,
    encode_message,
    idempotence_properties,
    send_batch_frame,
)
from fmq.protocol.layout import BATCH_FRAME_OVERHEAD, stored_message_size
from fmq.protocol.schema import MESSAGE, STORED_MESSAGE
from fmq.protocol.values import message_to_wire, result_from_wire, stored_to_wire


def schema_message(topic, body, key=None, tags=None, properties=None, queue_id=None,
                   idempotence=None) -> bytes:
    if idempotence is not None:
        properties = idempotence_properties(properties, *idempotence)
    out = bytearray()
    MESSAGE.encode(out, message_to_wire(Message(topic, body, key, tags, properties, queue_id)))
    return bytes(out)


MESSAGE_ENCODERS = {"batch fast path": encode_message, "schema": schema_message}
MESSAGE_CASES = [
    {"topic": "t", "body": b"x" * 1024},
    {"topic": "topic.a:b%c|d-e_f", "body": b"\x00\xff", "key": "k", "tags": "tag"},
    {"topic": "t", "body": b"b", "key": "", "tags": ""},  # empty travels as null
    {"topic": "t", "body": b"b", "key": "ключ", "tags": "標籤", "queue_id": 3},
    {"topic": "t", "body": b"b", "queue_id": -1},
    {"topic": "t", "body": b"b", "queue_id": (1 << 31) - 1},
    {"topic": "t", "body": b"b", "properties": {"a": "1", "é": "ü"}},
    {"topic": "t", "body": bytearray(b"ba")},
    {"topic": "t", "body": b"b", "key": "k" * 0xFFFE},
    {"topic": "t", "body": b"b", "idempotence": ("p-é", 12_345_678_901)},
    {"topic": "t", "body": b"b", "properties": {"a": "1"}, "idempotence": ("p", 0)},
    {"topic": "t", "body": b"b", "idempotence": ("p" * 300, 1)},
]
BAD_MESSAGES = [
    ({"body": "text"}, InvalidArgument), ({"key": "k" * 0x10000}, ProtocolError),
    ({"tags": 5}, ProtocolError), ({"topic": None}, ProtocolError),
    ({"queue_id": 1 << 31}, ProtocolError), ({"queue_id": "1"}, ProtocolError),
    ({"properties": {"k": 1}}, ProtocolError),
]


@pytest.fixture(params=list(MESSAGE_ENCODERS))
def message_encoder(request):
    return MESSAGE_ENCODERS[request.param]


def _reference_message(topic, body, key=None, tags=None, properties=None, queue_id=None,
                       idempotence=None) -> bytes:
    if idempotence is not None:
        properties = idempotence_properties(properties, *idempotence)
    out = bytearray()
    MESSAGE.reference[0](out, message_to_wire(Message(topic, body, key, tags, properties,
                                                      queue_id)))
    return bytes(out)


@pytest.mark.parametrize("fields", MESSAGE_CASES, ids=range(len(MESSAGE_CASES)))
def test_a_message_is_the_field_types_bytes(message_encoder, fields):
    assert message_encoder(**fields) == _reference_message(**fields)


@pytest.mark.parametrize(("bad", "error"), BAD_MESSAGES, ids=range(len(BAD_MESSAGES)))
def test_a_message_the_wire_cannot_carry_is_refused(message_encoder, bad, error):
    with pytest.raises(error):
        message_encoder(**{"topic": "t", "body": b"b", **bad})


def schema_results(frame) -> list[SendResult]:
    return [result_from_wire(r) for r in decode_response(frame)["results"]]


RESULT_READERS = {"batch fast path": decode_send_results, "schema": schema_results}


@pytest.fixture(params=list(RESULT_READERS))
def results_reader(request):
    return RESULT_READERS[request.param]


@pytest.mark.parametrize("results", [
    [], [{"offset": 2**64 - 1, "queue_id": 2**32 - 1, "queue_offset": 0},
         {"offset": 5, "queue_id": 1, "queue_offset": 77}]])
def test_results_are_read(results_reader, results):
    frame = parse_frame(encode_response(Op.SEND_BATCH, 9, {"results": results})[4:])
    assert frame.flags == FLAG_RESPONSE
    assert results_reader(frame) == [SendResult(**r) for r in results]


@pytest.mark.parametrize("payload", [b"", b"\x00\x00", struct.pack(">I", 1),
                                     struct.pack(">I", 1) + bytes(21),
                                     struct.pack(">I", 2) + bytes(20)])
def test_a_malformed_answer_is_a_protocol_error(results_reader, payload):
    frame = parse_frame(struct.pack(">BBHQ", 1, Op.SEND_BATCH, FLAG_RESPONSE, 1) + payload)
    with pytest.raises(ProtocolError):
        results_reader(frame)


def encoded_size(m: StoredMessage) -> int:
    out = bytearray()
    STORED_MESSAGE.encode(out, stored_to_wire(m))
    return len(out)


SIZERS = {"layout": stored_message_size, "schema": encoded_size}
STORED = [StoredMessage("t", 0, 0, 0, b"", None, None, {}, 0),
          StoredMessage("ключ", 2**32 - 1, 9, 10, b"x" * 300, "k", "a||b", {"é": "ü", "": ""},
                        -1),
          StoredMessage("t" * 127, 1, 2, 3, b"b", "", "", {"k" * 50: "v" * 70}, 2**62)]


@pytest.mark.parametrize("sizer", list(SIZERS))
@pytest.mark.parametrize("message", STORED, ids=range(len(STORED)))
def test_a_stored_message_takes_its_encoded_size(sizer, message):
    out = bytearray()
    STORED_MESSAGE.reference[0](out, stored_to_wire(message))
    assert SIZERS[sizer](message) == len(out)


def test_a_batch_frame_is_the_schema_request():
    parts = [encode_message(**fields) for fields in MESSAGE_CASES]
    frame = send_batch_frame(2**64 - 1, parts, sum(map(len, parts)))
    wires = [message_to_wire(Message(f["topic"], f["body"], f.get("key"), f.get("tags"),
                                     idempotence_properties(f.get("properties"), *f["idempotence"])
                                     if "idempotence" in f else f.get("properties"),
                                     f.get("queue_id"))) for f in MESSAGE_CASES]
    assert frame == encode_request(Op.SEND_BATCH, 2**64 - 1, {"messages": wires})
    assert len(frame) == BATCH_FRAME_OVERHEAD + sum(map(len, parts))
