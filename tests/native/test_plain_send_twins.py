"""The plain SEND's decode (``MessageDecoder.plain_send`` of
``fmq.protocol._message_requests_c``) against its reference
(``fmq.protocol.message_requests.plain_send_reference``): the same Message or the same
None for well-formed SEND payloads near every check's edge (topic names, body sizes, keys,
tags, properties, queue ids) and for hostile ones; and the reference's promise itself: a
message it gives passes ``check_message`` and is the general decode's message, and one
that ``check_message`` refuses is never given (the session's short step rests on it)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.errors import FMQError
from fmq.message import MAX_PROPERTIES, Message, check_message
from fmq.protocol import Op
from fmq.protocol import message_requests as S
from tests.native.twins import compiled, damaged, outcome

MAX_SIZE = 16  # max_message_size of these checks: bodies around it
#: Characters around the topic rules: allowed ones, "%" (internal when first), others.
TOPICS = st.text(alphabet="ab|-.:_%\n é", min_size=0, max_size=4) | st.text(
    alphabet="ab", min_size=125, max_size=129)
LABELS = st.none() | st.text(alphabet="ab\x00é", max_size=4) | st.text(
    alphabet="aé", min_size=120, max_size=140)
NAMES = st.sampled_from(["", "a", "%", "%producer", "%seq", "é", "a%", "b\x00"])
VALUES = st.sampled_from(["", "v", "é", "%", "\x00"])
PROPERTIES = st.lists(st.tuples(NAMES, VALUES), max_size=4)  # repeated names included
QUEUE_IDS = st.sampled_from([-1, 0, 1, 7, -2, 2**31 - 1, -(2**31)])


def _str(text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")
    return struct.pack(">H", len(data)) + data


def _optstr(text: str | None) -> bytes:
    return b"\xff\xff" if text is None else _str(text)


def send_payload(topic: str, body: bytes, key: str | None, tags: str | None,
                 properties: list[tuple[str, str]], queue_id: int) -> bytes:
    """A SEND payload written field by field (docs/protocol.md), so that properties may
    repeat a name, as a hostile client's may."""
    return (_str(topic) + struct.pack(">I", len(body)) + body + _optstr(key) + _optstr(tags)
            + struct.pack(">H", len(properties))
            + b"".join(_str(k) + _str(v) for k, v in properties)
            + struct.pack(">i", queue_id))


@pytest.fixture(scope="module")
def fast():
    return compiled("fmq.protocol._message_requests_c").MessageDecoder(S.reference_decode)


def _check_the_promise(payload: bytes, got: Message | None) -> None:
    """A plain message is the general decode's and passes check_message; a decoded
    message that check_message refuses is never plain."""
    general = outcome(S.reference_decode, Op.SEND, payload)
    if got is not None:
        assert general == ("value", {"message": got})
        check_message(got, MAX_SIZE, lambda topic: 1)
    elif general[0] == "value" and general[1]["message"].queue_id is None:
        message = general[1]["message"]
        try:
            check_message(message, MAX_SIZE, lambda topic: 1)
        except FMQError:
            return
        # It passes, yet was declined: only for what the plain rules leave out.
        assert not S.plain_message(message, MAX_SIZE)


@settings(max_examples=800, deadline=None)
@given(topic=TOPICS, size=st.integers(0, MAX_SIZE + 2), key=LABELS, tags=LABELS,
       properties=PROPERTIES, queue_id=QUEUE_IDS,
       how=st.sampled_from(["as it is", "as it is", "truncated", "flipped", "trailing",
                          "not utf-8"]),
       at=st.integers(0, 300), byte=st.integers(0, 255),
       kind=st.sampled_from(["bytes", "bytearray", "memoryview", "sliced view"]))
def test_compiled_plain_send_is_the_reference(fast, topic, size, key, tags, properties,
                                              queue_id, how, at, byte, kind) -> None:
    data = damaged(send_payload(topic, b"x" * size, key, tags, properties, queue_id),
                    how, at, byte)
    payload = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data),
               "sliced view": memoryview(b"\x00" + data + b"\x00")[1:-1]}[kind]
    got = outcome(fast.plain_send, payload, MAX_SIZE)
    assert got == outcome(S.plain_send_reference, payload, MAX_SIZE)
    _check_the_promise(data, got[1])


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=60))
def test_random_bytes_are_declined_alike(fast, data) -> None:
    got = outcome(fast.plain_send, data, MAX_SIZE)
    assert got == outcome(S.plain_send_reference, data, MAX_SIZE)
    _check_the_promise(data, got[1])


def test_a_plain_message_comes_back_whole(fast) -> None:
    payload = send_payload("orders.eu|1", b"x" * MAX_SIZE, "k", "", [("a", "1"), ("b", "")], -1)
    want = Message("orders.eu|1", b"x" * MAX_SIZE, "k", "", {"a": "1", "b": ""}, None)
    for plain_send in (fast.plain_send, S.plain_send_reference):
        got = plain_send(payload, MAX_SIZE)
        assert got == want and type(got) is Message


@pytest.mark.parametrize("payload", [
    send_payload("%RETRY%g", b"x", None, None, [], -1),  # internal topic
    send_payload("a" * 128, b"x", None, None, [], -1),  # topic too long
    send_payload("", b"x", None, None, [], -1),  # no topic
    send_payload("t", b"x" * (MAX_SIZE + 1), None, None, [], -1),  # body over the limit
    send_payload("t", b"x", "k\x00", None, [], -1),  # NUL in a key
    send_payload("t", b"x", None, "é" * 128, [], -1),  # tags over 255 bytes
    send_payload("t", b"x", None, None, [("%producer", "p")], -1),  # idempotence
    send_payload("t", b"x", None, None, [("é", "v")], -1),  # not ASCII: the full checks
    send_payload("t", b"x", None, None, [], 0),  # a queue id: checked against its topic
    send_payload("t", b"x", None, None, [], -1) + b"\x00",  # trailing bytes
    # The properties' encoded size one byte over the limit.
    send_payload("t", b"x", None, None, [("p", "v" * (MAX_PROPERTIES - 6))], -1),
])
def test_what_is_not_plain_is_declined(fast, payload) -> None:
    assert fast.plain_send(payload, MAX_SIZE) is None
    assert S.plain_send_reference(payload, MAX_SIZE) is None


def test_properties_at_their_size_limit_and_a_repeated_name(fast) -> None:
    # 2 bytes of count, 4 of lengths, 1 of name, the value: MAX_PROPERTIES in all.
    at_limit = send_payload("t", b"x", None, None, [("p", "v" * (MAX_PROPERTIES - 7))], -1)
    # A repeated name: the last value stands (as the general decode's dict has it), and
    # an earlier value that would not be plain no longer counts.
    repeated = send_payload("t", b"x", None, None, [("a", "é"), ("a", "v")], -1)
    for plain_send in (fast.plain_send, S.plain_send_reference):
        assert plain_send(at_limit, MAX_SIZE).properties == {"p": "v" * (MAX_PROPERTIES - 7)}
        assert plain_send(repeated, MAX_SIZE).properties == {"a": "v"}


def test_other_buffers_and_objects_are_declined(fast) -> None:
    wide = memoryview(send_payload("t", b"x", None, None, [], -1)).cast("H")
    for payload in (wide, None, "text", 7):
        assert fast.plain_send(payload, MAX_SIZE) is None


def batch_payload(messages: list[bytes]) -> bytes:
    """A SEND_BATCH payload of SEND payloads' message structs (the same layout)."""
    return struct.pack(">I", len(messages)) + b"".join(messages)


@settings(max_examples=400, deadline=None)
@given(messages=st.lists(st.tuples(TOPICS, st.integers(0, MAX_SIZE + 1), LABELS, LABELS,
                                   PROPERTIES, QUEUE_IDS), max_size=4),
       how=st.sampled_from(["as it is", "as it is", "truncated", "flipped", "trailing",
                          "not utf-8"]),
       at=st.integers(0, 300), byte=st.integers(0, 255))
def test_compiled_plain_send_batch_is_the_reference(fast, messages, how, at, byte) -> None:
    data = damaged(batch_payload([send_payload(t, b"x" * n, k, g, p, q)
                                   for t, n, k, g, p, q in messages]), how, at, byte)
    got = outcome(fast.plain_send_batch, data, MAX_SIZE)
    assert got == outcome(S.plain_send_batch_reference, data, MAX_SIZE)
    if got[1] is not None:  # the general decode's messages, each passing check_message
        assert outcome(S.reference_decode, Op.SEND_BATCH, data) == ("value",
                                                                    {"messages": got[1]})
        for message in got[1]:
            check_message(message, MAX_SIZE, lambda topic: 1)


def test_a_batch_is_plain_only_whole_and_not_empty(fast) -> None:
    plain = send_payload("t", b"x", None, None, [], -1)
    pinned = send_payload("t", b"x", None, None, [], 0)  # a queue id: not plain
    for plain_send_batch in (fast.plain_send_batch, S.plain_send_batch_reference):
        assert plain_send_batch(batch_payload([plain, plain]), MAX_SIZE) == [
            Message("t", b"x")] * 2
        assert plain_send_batch(batch_payload([plain, pinned]), MAX_SIZE) is None
        assert plain_send_batch(batch_payload([]), MAX_SIZE) is None  # answered the general way
        assert plain_send_batch(b"\x00\x00\x00\x05" + plain, MAX_SIZE) is None  # count past the end
