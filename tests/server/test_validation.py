"""Argument validation on the wire: each value a hostile client found accepted (or answered
with an internal error) now gets a typed error, and valid values stay valid."""

from __future__ import annotations

import struct

import pytest

from fmq.client import Client, Producer
from fmq.errors import FMQError, InvalidArgument, OffsetOutOfRange, ProtocolError, UnknownQueue
from fmq.protocol import Op, decode_error, encode_request

from .conftest import FAST
from .test_bad_input import raw, read_until_eof


def message(topic: str, body: bytes = b"x", queue_id: int = -1, key: str | None = None) -> dict:
    return {"topic": topic, "body": body, "key": key, "tags": None, "properties": {},
            "queue_id": queue_id}


@pytest.fixture
def server(start_server):
    return start_server(FAST)


@pytest.mark.parametrize("bad", ["t\n", "t\r", "\nt", "t\x00", "t\x1b", "t\u2028"])
def test_control_characters_in_names_are_refused(server, bad):
    with Client(server.address) as c:
        calls = [
            (Op.SEND, {"message": message(bad)}),
            (Op.SEND_BATCH, {"messages": [message("ok"), message(bad)]}),
            (Op.PREPARE, {"producer_group": bad, "tx_id": None, "messages": [message("ok")]}),
            (Op.PREPARE, {"producer_group": "g", "tx_id": bad, "messages": [message("ok")]}),
            (Op.GROUP_JOIN, {"group": bad, "member_id": None, "topics": ["ok"]}),
            (Op.GROUP_JOIN, {"group": "g", "member_id": bad, "topics": ["ok"]}),
            (Op.GROUP_JOIN, {"group": "g", "member_id": None, "topics": [bad]}),
            (Op.COMMIT_OFFSET, {"group": bad, "topic": "ok", "queue_id": 0, "next_offset": 0}),
            (Op.FETCH_OFFSET, {"group": bad, "topic": "ok", "queue_id": 0}),
            (Op.POLL_UNCERTAIN, {"producer_group": bad, "max_items": 1, "lease_ms": 10,
                                 "wait_ms": 0}),
            (Op.PULL, {"topic": bad, "queue_id": 0, "offset": 0, "max_messages": 1,
                       "wait_ms": 0}),
        ]
        for op, fields in calls:
            with pytest.raises(InvalidArgument) as info:
                c.call(op, fields)
            assert "control character" in str(info.value) or "topic" in str(info.value), (
                op.name, info.value)
        # nothing was stored, nobody joined
        assert c.call(Op.LIST_TX, {})["transactions"] == []
        assert c.call(Op.QUEUE_RANGE, {"topic": "ok", "queue_id": 0}) == {
            "min_offset": 0, "next_offset": 0}


def test_valid_names_stay_valid(server):
    with Producer(server.address) as p:
        topic = "A.b:c%d|e-f_9"
        assert p.send(topic, b"x", key="key with spaces\tand tab").queue_offset == 0
        tx = p.call(Op.PREPARE, {"producer_group": "grüße-1 ✓", "tx_id": "1-127.0.0.1-9",
                                 "messages": [message(topic)]})["tx_id"]
        assert p.call(Op.COMMIT, {"producer_group": "grüße-1 ✓", "tx_id": tx})["state"] == "commit"
        joined = p.call(Op.GROUP_JOIN, {"group": "Grüppe ä", "member_id": "m 1",
                                        "topics": [topic]})
        assert joined["member_id"] == "m 1"


def test_a_forged_log_line_never_reaches_the_server_log(server):
    forged = "g\n2026-01-01 00:00:00,000 WARNING fmq.server: FORGED"
    with Client(server.address) as c:
        for op, fields in [
            (Op.GROUP_JOIN, {"group": forged, "member_id": None, "topics": ["ok"]}),
            (Op.GROUP_JOIN, {"group": "g", "member_id": forged, "topics": ["ok"]}),
            (Op.RESOLVE_TX, {"producer_group": "g", "tx_id": forged, "decision": "commit"}),
            (Op.RESOLVE_TX, {"producer_group": forged, "tx_id": "t", "decision": "commit"}),
            (Op.GROUP_LEAVE, {"group": forged, "member_id": forged}),
        ]:
            try:
                c.call(op, fields)
            except FMQError:
                pass  # refused or unknown: either way nothing may reach the log unescaped
    server.stop()
    assert not any(line.endswith("FORGED") and not line.startswith("g")
                   for line in server.log().splitlines()), server.log()
    assert "\nFORGED" not in server.log() and " fmq.server: FORGED" not in server.log()


def test_queue_id_is_minus_one_or_an_existing_queue(server):
    with Producer(server.address) as p:
        for qid in (-2, -(1 << 31), 4):
            for op, fields in [
                (Op.SEND, {"message": message("q", queue_id=qid)}),
                (Op.SEND_BATCH, {"messages": [message("q", queue_id=qid)]}),
                (Op.PREPARE, {"producer_group": "g", "tx_id": None,
                              "messages": [message("q", queue_id=qid)]}),
            ]:
                with pytest.raises(UnknownQueue, match="queue id"):
                    p.call(op, fields)
        assert p.call(Op.SEND, {"message": message("q", queue_id=-1)})["result"]["queue_id"] in (
            0, 1, 2, 3)
        assert p.call(Op.SEND, {"message": message("q", queue_id=3)})["result"]["queue_id"] == 3
        assert p.call(Op.LIST_TX, {})["transactions"] == []


def test_counts_must_be_at_least_one(server):
    with Producer(server.address) as p:
        for i in range(3):
            p.send("c", b"m%d" % i, key="k", queue_id=0)
        pull = {"topic": "c", "queue_id": 0, "offset": 0, "max_messages": 0, "wait_ms": 0}
        with pytest.raises(InvalidArgument, match="max_messages"):
            p.call(Op.PULL, pull)
        assert len(p.call(Op.PULL, dict(pull, max_messages=1))["messages"]) == 1
        with pytest.raises(InvalidArgument, match="limit"):
            p.call(Op.QUERY_KEY, {"topic": "c", "key": "k", "limit": 0})
        assert len(p.call(Op.QUERY_KEY, {"topic": "c", "key": "k", "limit": 2})["messages"]) == 2
        with pytest.raises(InvalidArgument, match="max_items"):
            p.call(Op.POLL_UNCERTAIN, {"producer_group": "g", "max_items": 0, "lease_ms": 10,
                                       "wait_ms": 0})


def test_commit_offset_is_refused_past_the_queue_end(server):
    with Producer(server.address) as p:
        for i in range(3):
            p.send("co", b"m%d" % i, queue_id=1)
        commit = {"group": "g", "topic": "co", "queue_id": 1, "next_offset": 3}
        p.call(Op.COMMIT_OFFSET, commit)  # just past the last message: fine
        for past in (4, 1 << 40, (1 << 63) - 1):
            with pytest.raises(OffsetOutOfRange, match=r"0\.\.3"):
                p.call(Op.COMMIT_OFFSET, dict(commit, next_offset=past))
        for beyond_the_store in (1 << 63, (1 << 64) - 1):
            with pytest.raises(InvalidArgument, match="next_offset"):
                p.call(Op.COMMIT_OFFSET, dict(commit, next_offset=beyond_the_store))
        with pytest.raises(OffsetOutOfRange, match=r"0\.\.0"):
            p.call(Op.COMMIT_OFFSET, dict(commit, queue_id=2, next_offset=1))
        assert p.call(Op.FETCH_OFFSET, {"group": "g", "topic": "co", "queue_id": 1}) == {
            "offset": 3}


def test_integers_beyond_what_the_store_holds_are_invalid_argument(server):
    with Producer(server.address) as p:
        p.send("big", b"x", queue_id=0)
        for value in (1 << 63, (1 << 64) - 1):
            with pytest.raises(InvalidArgument, match="offset"):
                p.call(Op.PULL, {"topic": "big", "queue_id": 0, "offset": value,
                                 "max_messages": 1, "wait_ms": 0})
            with pytest.raises(InvalidArgument, match="timestamp_ms"):
                p.call(Op.OFFSET_FOR_TIME, {"topic": "big", "queue_id": 0,
                                            "timestamp_ms": value})
        for qid in (4, (1 << 31), (1 << 32) - 1):
            with pytest.raises(UnknownQueue):
                p.call(Op.QUEUE_RANGE, {"topic": "big", "queue_id": qid})
        got = p.call(Op.PULL, {"topic": "big", "queue_id": 0, "offset": (1 << 63) - 1,
                               "max_messages": 1, "wait_ms": 0})
        assert got["messages"] == [] and got["next_offset"] == 1


@pytest.mark.parametrize("op", [Op.COMMIT, Op.ROLLBACK, Op.RESOLVE_TX, Op.ANSWER_UNCERTAIN])
def test_an_empty_tx_id_is_invalid_argument(server, op):
    fields = {"producer_group": "g", "tx_id": ""}
    if op == Op.RESOLVE_TX:
        fields["decision"] = "commit"
    if op == Op.ANSWER_UNCERTAIN:
        fields["state"] = "commit"
    with Client(server.address) as c:
        with pytest.raises(InvalidArgument, match="tx_id"):
            c.call(op, fields)
        with pytest.raises(InvalidArgument, match="tx_id"):
            c.call(op, dict(fields, tx_id="x" * 256))


def test_request_id_zero_is_a_protocol_error_and_closes_the_connection(server):
    s = raw(server.address)
    s.sendall(encode_request(Op.PING, 0, {}) + encode_request(Op.PING, 1, {}))
    frames, closed = read_until_eof(s)
    s.close()
    assert closed, "the connection stayed open after a request with the reserved id 0"
    assert len(frames) == 1 and frames[0].request_id == 0 and frames[0].is_error
    err = decode_error(frames[0])
    assert isinstance(err, ProtocolError) and "request id 0" in str(err)
    with Client(server.address) as c:  # other connections are unaffected
        assert c.ping()["protocol_version"] == 1


def test_request_id_zero_on_a_send_stores_nothing(server):
    s = raw(server.address)
    s.sendall(encode_request(Op.SEND, 0, {"message": message("zero", b"never")}))
    frames, closed = read_until_eof(s)
    s.close()
    assert closed and frames[0].request_id == 0
    assert struct.unpack(">H", bytes(frames[0].payload[:2]))[0] == ProtocolError.code
    with Client(server.address) as c:
        for qid in range(4):
            assert c.call(Op.QUEUE_RANGE, {"topic": "zero", "queue_id": qid})["next_offset"] == 0
