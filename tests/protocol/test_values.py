"""The wire <-> value conversions give back what went in, through the encoder."""

from __future__ import annotations

import pytest

from fmq.errors import InvalidArgument
from fmq.message import Message, SendResult, StoredMessage
from fmq.protocol import Op, decode_request, decode_response, encode_request, encode_response
from fmq.protocol import parse_frame as parse
from fmq.protocol.values import (
    message_from_wire,
    message_to_wire,
    result_from_wire,
    result_to_wire,
    stored_from_wire,
    stored_to_wire,
    uncertain_from_wire,
    uncertain_to_wire,
)
from fmq.tx.state import PreparedMessage, UncertainTx


def through_request(op: Op, fields: dict) -> dict:
    return decode_request(parse(encode_request(op, 1, fields)[4:]))


def through_response(op: Op, fields: dict) -> dict:
    return decode_response(parse(encode_response(op, 1, fields)[4:]))


@pytest.mark.parametrize("msg", [
    Message("t", b"body"),
    Message("t", b"", key="k", tags="a||b", properties={"p": "v"}, queue_id=3),
])
def test_a_message_comes_back_as_it_was_sent(msg):
    wire = through_request(Op.SEND, {"message": message_to_wire(msg)})["message"]
    assert message_from_wire(wire) == msg


def test_what_the_wire_cannot_carry_is_refused_before_sending():
    with pytest.raises(InvalidArgument, match="encode text first"):
        message_to_wire(Message("t", "text"))
    with pytest.raises(InvalidArgument, match="expected fmq.Message"):
        message_to_wire({"topic": "t"})


def test_results_stored_messages_and_uncertain_transactions_come_back():
    result = SendResult(10, 2, 7)
    wire = through_response(Op.SEND, {"result": result_to_wire(result)})["result"]
    assert result_from_wire(wire) == result
    stored = StoredMessage("t", 1, 5, 99, b"b", "k", None, {"p": "v"}, 1234)
    wire = through_response(Op.QUERY_KEY, {"messages": [stored_to_wire(stored)]})["messages"]
    assert stored_from_wire(wire[0]) == stored
    uncertain = UncertainTx("tx-1", "shop", 40, 1234, 2, [
        PreparedMessage("t", b"x", None, None, {}, queue_id=0, offset=40)])
    wire = through_response(Op.POLL_UNCERTAIN,
                            {"transactions": [uncertain_to_wire(uncertain)]})["transactions"]
    assert uncertain_from_wire(wire[0]) == uncertain
