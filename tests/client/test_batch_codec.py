"""The batching client's SEND_BATCH codec writes exactly the schema's bytes and reads the
answer exactly as the generic decoder does."""

from __future__ import annotations

import struct

import pytest

from fmq.errors import InvalidArgument, ProtocolError
from fmq.message import Message, SendResult
from fmq.protocol import FLAG_RESPONSE, Op, encode_request, encode_response, parse_frame
from fmq.protocol.batch import (
    BATCH_FRAME_OVERHEAD,
    decode_send_results,
    encode_message,
    idempotence_properties,
    send_batch_frame,
)
from fmq.protocol.values import message_to_wire

MESSAGES = [
    Message("t", b"x" * 1024),
    Message("t", b""),
    Message("topic.a:b%c|d-e_f", b"\x00\xff" * 10, key="k", tags="tag"),
    Message("t", b"b", key="", tags=""),  # empty travels as null
    Message("t", b"b", key="ключ", tags="標籤", queue_id=3),
    Message("t", b"b", queue_id=0),
    Message("t", b"b", queue_id=-1),
    Message("t", b"b", queue_id=(1 << 31) - 1),
    Message("t", b"b", properties={"a": "1", "é": "ü"}),  # the generic path
    Message("t", bytearray(b"ba")),  # the generic path
    Message("t", b"b", key="k" * 0xFFFE),
]


def generic(messages: list[Message], rid: int = 7) -> bytes:
    return encode_request(Op.SEND_BATCH, rid, {"messages": [message_to_wire(m)
                                                            for m in messages]})


def parts_of(messages: list[Message]) -> list[bytes]:
    return [encode_message(m.topic, m.body, m.key, m.tags, m.properties, m.queue_id)
            for m in messages]


@pytest.mark.parametrize("message", MESSAGES, ids=range(len(MESSAGES)))
def test_one_message_frames_the_same_bytes_as_the_schema(message):
    parts = parts_of([message])
    assert send_batch_frame(7, parts, sum(map(len, parts))) == generic([message])


def test_a_batch_frames_the_same_bytes_as_the_schema():
    parts = parts_of(MESSAGES)
    frame = send_batch_frame(2**64 - 1, parts, sum(map(len, parts)))
    assert frame == generic(MESSAGES, 2**64 - 1)
    assert len(frame) == BATCH_FRAME_OVERHEAD + sum(map(len, parts))


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"body": "text"}, InvalidArgument),
    ({"key": "k" * 0x10000}, ProtocolError),
    ({"tags": 5}, ProtocolError),
    ({"topic": None}, ProtocolError),
    ({"queue_id": 1 << 31}, ProtocolError),
    ({"queue_id": "1"}, ProtocolError),
    ({"properties": {"k": 1}}, ProtocolError),
])
def test_values_the_wire_cannot_carry_fail_as_a_synchronous_send_does(kwargs, error):
    fields = {"topic": "t", "body": b"b", **kwargs}
    with pytest.raises(error):
        encode_message(**fields)
    m = Message(fields["topic"], fields["body"], fields.get("key"), fields.get("tags"),
                fields.get("properties"), fields.get("queue_id"))
    with pytest.raises(error):
        generic([m])


def answer(results: list[dict]) -> bytes:
    return encode_response(Op.SEND_BATCH, 9, {"results": results})


def test_results_are_read_as_the_generic_decoder_reads_them():
    results = [{"offset": 2**64 - 1, "queue_id": 2**32 - 1, "queue_offset": 0},
               {"offset": 5, "queue_id": 1, "queue_offset": 77}]
    frame = parse_frame(answer(results)[4:])
    assert frame.flags == FLAG_RESPONSE
    assert decode_send_results(frame) == [SendResult(**r) for r in results]
    assert decode_send_results(parse_frame(answer([])[4:])) == []


@pytest.mark.parametrize("payload", [b"", b"\x00\x00", struct.pack(">I", 1),
                                     struct.pack(">I", 1) + bytes(21),
                                     struct.pack(">I", 2) + bytes(20)])
def test_a_malformed_answer_is_a_protocol_error(payload):
    frame = parse_frame(struct.pack(">BBHQ", 1, Op.SEND_BATCH, FLAG_RESPONSE, 1) + payload)
    with pytest.raises(ProtocolError):
        decode_send_results(frame)


@pytest.mark.parametrize("message", MESSAGES, ids=range(len(MESSAGES)))
@pytest.mark.parametrize("producer, seq", [("0123456789abcdef", 0), ("p-é", 12_345_678_901)])
def test_an_idempotent_message_frames_the_schema_bytes_with_its_sequence(message, producer,
                                                                         seq):
    numbered = Message(message.topic, message.body, message.key, message.tags,
                       idempotence_properties(message.properties, producer, seq),
                       message.queue_id)
    part = encode_message(message.topic, message.body, message.key, message.tags,
                          message.properties, message.queue_id, (producer, seq))
    assert send_batch_frame(7, [part], len(part)) == generic([numbered])
