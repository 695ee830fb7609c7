"""PREPARE and COMMIT on the send pipeline (fmq.server.ops.tx_ops): requests that arrive
together are placed in one event-loop turn, and a COMMIT that meets its transaction busy
(another COMMIT of it placed in the same turn) is finished by a worker thread with the
same answer. A real server on 127.0.0.1; raw frames so that several requests arrive in
one read."""

from __future__ import annotations

import asyncio
import socket

from fmq.client import Client
from fmq.protocol import FrameDecoder, Op, decode_error, decode_response, encode_request
from fmq.server.ops.placed import FinishTogether, PlacedWrites

from .conftest import FAST


def message(topic: str, body: bytes) -> dict:
    return {"topic": topic, "body": body, "key": None, "tags": None, "properties": {},
            "queue_id": 0}


def exchange(address: str, frames: list[bytes], answers: int) -> dict[int, object]:
    """Send ``frames`` in one write; the decoded answer (or error) by request id."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.settimeout(10)
        s.sendall(b"".join(frames))
        dec = FrameDecoder()
        got: list = []
        while len(got) < answers:
            data = s.recv(65536)
            assert data, "the server closed the connection"
            got.extend(dec.feed(data))
    return {f.request_id: decode_error(f) if f.is_error else decode_response(f) for f in got}


def test_commits_of_one_transaction_in_one_turn_both_answer_commit(start_server):
    srv = start_server(FAST)
    prepared = exchange(srv.address, [encode_request(
        Op.PREPARE, 1, {"producer_group": "g", "tx_id": None,
                        "messages": [message("pay", b"once")]})], 1)
    tx_id = prepared[1]["tx_id"]
    # Two COMMITs in one read: the second finds the transaction busy with the first.
    commits = exchange(srv.address, [encode_request(Op.COMMIT, rid, {"producer_group": "g",
                                                                     "tx_id": tx_id})
                                     for rid in (2, 3, 4)], 3)
    assert commits == {2: {"state": "commit"}, 3: {"state": "commit"},
                       4: {"state": "commit"}}
    rollback = exchange(srv.address, [encode_request(Op.ROLLBACK, 5, {"producer_group": "g",
                                                                "tx_id": tx_id})], 1)
    assert "already ended with commit" in str(rollback[5])
    with Client(srv.address, retries=0) as c:
        got = c.call(Op.PULL, {"topic": "pay", "queue_id": 0, "offset": 0,
                               "max_messages": 10, "wait_ms": 0})["messages"]
    assert [m["body"] for m in got] == [b"once"]


def test_prepares_and_commits_arriving_together_are_each_answered(start_server):
    srv = start_server(FAST)
    n = 20
    prepares = exchange(srv.address, [encode_request(
        Op.PREPARE, rid, {"producer_group": "g", "tx_id": f"tx-{rid}",
                          "messages": [message("pay", f"m{rid}".encode())]})
        for rid in range(1, n + 1)] + [encode_request(
            Op.PREPARE, n + 1, {"producer_group": "g", "tx_id": "tx-1",
                                "messages": [message("pay", b"again")]})], n + 1)
    assert {rid: prepares[rid]["tx_id"] for rid in range(1, n + 1)} == {
        rid: f"tx-{rid}" for rid in range(1, n + 1)}
    # The same id twice in one turn: the second is refused, the first is stored once.
    assert "tx-1" in str(prepares[n + 1]) and not isinstance(prepares[n + 1], dict)
    commits = exchange(srv.address, [encode_request(Op.COMMIT, rid, {"producer_group": "g",
                                                                     "tx_id": f"tx-{rid}"})
                                     for rid in range(1, n + 1)], n)
    assert all(commits[rid] == {"state": "commit"} for rid in range(1, n + 1))
    with Client(srv.address, retries=0) as c:
        got = c.call(Op.PULL, {"topic": "pay", "queue_id": 0, "offset": 0,
                               "max_messages": 100, "wait_ms": 0})["messages"]
    assert sorted(m["body"] for m in got) == sorted(f"m{rid}".encode()
                                                    for rid in range(1, n + 1))


def test_a_retried_prepare_after_a_send_in_one_turn_is_answered(start_server):
    """A retried PREPARE ends where its first attempt ended, before the send placed in
    the same turn: the acknowledger once found nothing to release and spun at 100 % CPU,
    and neither request was ever answered."""
    srv = start_server(FAST)
    prepare = {"producer_group": "g", "tx_id": "tx-again",
               "messages": [message("pay", b"once")]}
    first = exchange(srv.address, [encode_request(Op.PREPARE, 1, prepare)], 1)
    assert first[1]["tx_id"] == "tx-again"
    both = exchange(srv.address, [
        encode_request(Op.SEND, 2, {"message": message("other", b"plain")}),
        encode_request(Op.PREPARE, 3, prepare)], 2)
    assert both[3]["tx_id"] == "tx-again", both
    assert not isinstance(both[2], Exception), both
    # The server is still responsive: a later request is answered too.
    later = exchange(srv.address, [encode_request(Op.COMMIT, 4, {"producer_group": "g",
                                                              "tx_id": "tx-again"})], 1)
    assert later == {4: {"state": "commit"}}


def test_a_turns_writes_wait_for_the_furthest_end_when_a_retry_ends_earlier():
    """A retried PREPARE is answered from its first attempt, whose records end before
    those of a fresh PREPARE placed earlier in the same turn: the turn's writes must wait
    for the fresh one's end, not the retry's (the acknowledger answers them all once the
    log is durable up to ``end``)."""
    placed = PlacedWrites()
    placed.add(None, None, "fresh", 1000)
    placed.add(None, None, "retried", 500)
    assert placed.end == 1000


def test_a_turns_writes_of_one_finish_are_finished_together_and_answered_in_order():
    """Consecutive writes of one :class:`FinishTogether` are finished by one ``together``
    call (a turn's PREPAREs under one hold of the manager's lock), the others one by one;
    every future gets its own answer, in order, and a bug in ``together`` fails its run
    only."""
    loop = asyncio.new_event_loop()
    try:
        calls: list = []

        def together(tokens, failure):
            calls.append(("together", list(tokens), failure))
            if "bad" in tokens:
                raise RuntimeError("a bug")
            return [f"{t}!" for t in tokens]

        def one(token, failure):
            calls.append(("one", token, failure))
            return f"{token}?"

        tx = FinishTogether(one, together)
        other = FinishTogether(one, together)
        answered: list = []
        placed = PlacedWrites()
        futures = []
        for finish, token in [(tx, "a"), (tx, "b"), (one, "c"), (tx, "d"), (other, "bad"),
                              (other, "bad2"), (tx, "e")]:
            fut = loop.create_future()
            futures.append(fut)
            placed.add(fut, finish, token, 10, answered.append)
        placed.answer(None, False)
        assert calls == [("together", ["a", "b"], None), ("one", "c", None),
                         ("together", ["d"], None), ("together", ["bad", "bad2"], None),
                         ("together", ["e"], None)]
        assert answered == futures
        assert [f.result() for f in futures[:4]] == ["a!", "b!", "c?", "d!"]
        assert [str(f.exception()) for f in futures[4:6]] == ["a bug", "a bug"]
        assert futures[6].result() == "e!"
        failed = PlacedWrites()
        fut = loop.create_future()
        failed.add(fut, tx, "f", 10)
        flush_failed = OSError("the flush failed")
        failed.answer(flush_failed, False)
        assert calls[-1] == ("together", ["f"], flush_failed) and fut.exception() is flush_failed
    finally:
        loop.close()
