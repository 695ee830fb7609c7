"""The compiled decode of the requests that carry messages (SEND, SEND_BATCH, PREPARE,
SEND_AT; ``fmq.protocol._message_requests_c``) against its reference
(``fmq.protocol.message_requests``): equal fields and ``Message`` objects, or the same
error (type and message), for well-formed payloads and hostile ones (truncated, bytes
flipped, trailing bytes, text that is not UTF-8, counts past the end, other buffer types
and non-buffers). The reference itself is the server's decode before it existed: the
wire's field dicts (``decode_request``), then ``message_from_wire``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.message import Message
from fmq.protocol import Frame, Op, decode_request, encode_request
from fmq.protocol import message_requests as S
from fmq.protocol.values import message_from_wire, message_to_wire
from tests.native.twins import compiled, damaged, outcome

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
MESSAGES = st.builds(
    Message, topic=TEXT, body=st.binary(max_size=64),
    key=st.none() | TEXT, tags=st.none() | TEXT,
    properties=st.none() | st.dictionaries(TEXT, TEXT, max_size=3),
    queue_id=st.none() | st.integers(-(2**31) + 2, 2**31 - 1))


OPS = [Op.SEND, Op.SEND_BATCH, Op.PREPARE, Op.SEND_AT]
ONE_MESSAGE = (Op.SEND, Op.SEND_AT)
I64 = st.integers(-(2**63), 2**63 - 1)


@pytest.fixture(scope="module")
def fast():
    return compiled("fmq.protocol._message_requests_c").MessageDecoder(S.reference_decode)


def _fields(op: int, messages: list[Message], group: str = "g", tx_id: str | None = None,
            deliver_at: int = -1, delay_ms: int = 0) -> dict:
    if op in ONE_MESSAGE:
        fields = {"message": message_to_wire(messages[0])}
        if op == Op.SEND_AT:
            fields.update(deliver_at=deliver_at, delay_ms=delay_ms)
        return fields
    fields = {"messages": [message_to_wire(m) for m in messages]}
    if op == Op.PREPARE:
        fields = {"producer_group": group, "tx_id": tx_id, **fields}
    return fields


def _payload(op: int, messages: list[Message], **extra) -> bytes:
    # The payload after the frame's header.
    return encode_request(op, 1, _fields(op, messages, **extra))[16:]


def _both(fast, op: int, payload) -> tuple[tuple, tuple]:
    method = {Op.SEND: fast.send, Op.SEND_BATCH: fast.send_batch, Op.PREPARE: fast.prepare,
              Op.SEND_AT: fast.send_at}[op]
    return outcome(method, payload), outcome(S.reference_decode, op, payload)


@settings(max_examples=600, deadline=None)
@given(messages=st.lists(MESSAGES, min_size=1, max_size=4), op=st.sampled_from(OPS),
       group=TEXT, tx_id=st.none() | TEXT, deliver_at=I64, delay_ms=I64,
       how=st.sampled_from(["as it is", "truncated", "flipped", "trailing", "not utf-8"]),
       at=st.integers(0, 400), byte=st.integers(0, 255),
       kind=st.sampled_from(["bytes", "bytearray", "memoryview", "sliced view"]))
def test_compiled_decodes_and_fails_as_the_reference(fast, messages, op, group, tx_id,
                                                     deliver_at, delay_ms, how, at, byte,
                                                     kind) -> None:
    extra = {"group": group, "tx_id": tx_id, "deliver_at": deliver_at, "delay_ms": delay_ms}
    data = damaged(_payload(op, messages, **extra), how, at, byte)
    payload = {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data),
               "sliced view": memoryview(b"\x00" + data + b"\x00")[1:-1]}[kind]
    got, want = _both(fast, op, payload)
    assert got == want
    if how == "as it is":  # well-formed: the messages themselves come back
        assert got[0] == "value"
        # As the wire carries them (empty properties and tags travel as none).
        sent = [message_from_wire(message_to_wire(m)) for m in messages]
        want_fields = _fields(op, messages, **extra)
        if op in ONE_MESSAGE:
            want_fields["message"] = sent[0]
        else:
            want_fields["messages"] = sent
        assert got[1] == want_fields


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=80), op=st.sampled_from(OPS))
def test_random_bytes_decode_and_fail_alike(fast, data, op) -> None:
    got, want = _both(fast, op, data)
    assert got == want


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("payload", [
    None, 7, "text", memoryview(b"\x00\x01\x00\x00\x00\x00").cast("H"),
    memoryview(b"\x00\x00\x00\x01\x00\x01a\x00" * 4)[::2],
    b"\xff\xff\xff\xff", b"\x00\x00\x00\x02" + b"\x00" * 8,
    b"\x00\x01a\x00\x00\x00\x05abc",  # a body longer than what is left
])
def test_hostile_payloads_fail_alike(fast, op, payload) -> None:
    got, want = _both(fast, op, payload)
    assert got == want


@pytest.mark.parametrize("queue_id", [None, 0, 5, -2, 2**31 - 1, -(2**31) + 1])
def test_queue_ids_and_empty_properties_as_the_wire_reads_them(fast, queue_id) -> None:
    """-1 on the wire is "the broker picks" (None); other negative ids stay (the broker's
    checks refuse them); no properties and empty ones both come back as None."""
    message = Message("t", b"body", "k", None, {}, queue_id)
    got = fast.send(_payload(Op.SEND, [message]))["message"]
    assert got == Message("t", b"body", "k", None, None, queue_id)
    assert type(got) is Message and got.__dict__ == S.reference_decode(
        Op.SEND, _payload(Op.SEND, [message]))["message"].__dict__


@settings(max_examples=100, deadline=None)
@given(messages=st.lists(MESSAGES, min_size=1, max_size=4), op=st.sampled_from(OPS))
def test_the_reference_is_the_field_decode_then_message_from_wire(messages, op) -> None:
    """What the server did before: decode_request's field dicts, then message_from_wire;
    decode_server_request gives the same, compiled or pure."""
    payload = _payload(op, messages)
    before = decode_request(Frame(1, op, 0, 1, payload))
    if op in ONE_MESSAGE:
        before["message"] = message_from_wire(before["message"])
    else:
        before["messages"] = [message_from_wire(m) for m in before["messages"]]
    assert S.reference_decode(op, payload) == before
    assert S.decode_server_request(Frame(1, op, 0, 1, payload)) == before
    # Any other request decodes into the wire's fields, as before.
    ping = Frame(1, Op.PING, 0, 1, b"")
    assert S.decode_server_request(ping) == decode_request(ping)
