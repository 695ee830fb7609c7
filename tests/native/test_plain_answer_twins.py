"""A session's plain sends taken from its frames and a flush's sends answered in one pass:
``PlainSends.take`` and ``answer_sends`` of the compiled twin
(``fmq.server.net._plain_sends_c``) against their reference (``fmq.server.net.plain_sends``).

The same runs of frames (plain and not, SEND and SEND_BATCH among other requests, bad
headers, unknown topics, a topic's own size limit, a list limit, the in-flight room) are
taken alike: the same frames, queued in the same entries of a real ``SendBatcher`` over a
real broker, the same requests counted, the same request bytes held.

The same placed batches (plain sends of several sessions mixed with the general way's
requests, SENDs and SEND_BATCHes, packed results or a list, a failure or none, a primary
that may acknowledge or not) give the same calls, in the same order, to each session's
owner and to the general way: the same answer bytes, the same sends counted out, the same
request bytes given back. And the reference's promise: each answer it frames is the wire's
answer of that request as the codec writes it (what the general way sends)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.config import BrokerConfig
from fmq.engine.broker import Broker
from fmq.errors import LogFailed
from fmq.message import PackedResults, SendResult
from fmq.protocol import PROTOCOL_VERSION, Frame, Op, encode_response
from fmq.protocol.message_requests import PLAIN_SEND, PLAIN_SEND_BATCH
from fmq.server.config import ServerConfig
from fmq.server.context import ServerCounters
from fmq.server.net import plain_sends as reference
from fmq.server.ops.batcher import SendBatcher
from fmq.server.ops.handlers import send_batch_reply, send_reply
from fmq.server.server import request_limits
from tests.native.test_plain_send_twins import batch_payload, send_payload
from tests.native.twins import compiled, outcome

MAX_SIZE = 1024  # the broker's max_message_size

_RESULT = PackedResults.FORMAT


class Owner:
    """A session's side of its plain sends, every call written down in ``log`` (shared by
    every owner and the general way: the order of the writes is compared too)."""

    def __init__(self, name: str, log: list, acknowledges: bool) -> None:
        self.name = name
        self.log = log
        self._acknowledges = acknowledges

    def acknowledges(self) -> bool:
        self.log.append((self.name, "acknowledges"))
        return self._acknowledges

    def plain_received(self, size: int) -> None:
        self.log.append((self.name, "received", size))

    def plain_written(self, data: bytes, ended: int, size: int) -> None:
        self.log.append((self.name, "written", data, ended, size))

    def plain_failed(self, op: int, rid: int, exc: BaseException) -> None:
        self.log.append((self.name, "failed", op, rid, type(exc).__name__, str(exc)))

    def plain_results(self, op: int, rid: int, results: Sequence[Any]) -> None:
        self.log.append((self.name, "results", op, rid, list(results)))


def _results(count: int) -> list[SendResult]:
    return [SendResult(1000 + 7 * i, i % 3, (1 << 40) + i, "") for i in range(count)]


def _packed(results: list[SendResult]) -> PackedResults:
    return PackedResults(b"".join(_RESULT.pack(r.offset, r.queue_id, r.queue_offset)
                                  for r in results))


#: A request of a batch: (which session, 0-2, or None for the general way's; opcode;
#: messages; request id; request bytes).
REQUESTS = st.lists(st.tuples(st.sampled_from([0, 1, 2, None]),
                              st.sampled_from([Op.SEND, Op.SEND_BATCH]),
                              st.integers(1, 3), st.integers(1, 2**64 - 1),
                              st.integers(12, 1 << 20)), max_size=12)


class Place:
    """What a session's plain sends use to be taken: a real broker (its topic ``t``,
    ``small`` whose messages may have 100 bytes at most, ``gone``, deleted, and topics made
    as they are first sent to), a real send pipeline over it (its
    event loop not running: nothing is placed) and the server's counters and list limits."""

    def __init__(self, directory: str) -> None:
        self.broker = Broker.open(directory, BrokerConfig(max_message_size=MAX_SIZE))
        self.broker.topics.create("t")
        self.broker.topics.create("small", max_message_size=100)
        self.broker.topics.create("gone")
        self.broker.topics.delete("gone")  # a deleted topic refuses sends
        self.loop = asyncio.new_event_loop()
        self.batcher = SendBatcher(self.broker, self.loop, max_batch_messages=3)
        self.limits = request_limits(self.broker, ServerConfig(max_batch_messages=3))

    def plain_sends(self, module, owner: Owner, counters: ServerCounters):
        return module.PlainSends(owner, counters, self.batcher, self.broker, self.limits,
                                 PLAIN_SEND, PLAIN_SEND_BATCH)

    def close(self) -> None:
        self.batcher._sends.clear()
        self.batcher.close()
        self.loop.close()
        self.broker.close()


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    made = Place(str(tmp_path_factory.mktemp("plain-sends")))
    yield made
    made.close()


def _run(module, requests: list[tuple], packed: bool, failure: BaseException | None,
         acknowledges: bool, place: Place) -> tuple[list, list]:
    """What answering ``requests`` with ``module.answer_sends`` did: the log, and each
    session's count of sends in flight after it."""
    log: list = []
    sinks = [place.plain_sends(module, Owner(f"s{i}", log, acknowledges), ServerCounters())
             for i in range(3)]
    items = []
    total = 0
    for who, op, n, rid, size in requests:
        msgs = [None] * (1 if op == Op.SEND else n)
        total += len(msgs)
        if who is None:
            items.append((msgs, f"future {rid}", "reply", "answered"))
        else:
            sinks[who].count += 1
            items.append((msgs, None, sinks[who], rid, int(op), size))
    results = _results(total)
    given = _packed(results) if packed else results

    def general(item: tuple, mine: Any, failed: BaseException | None) -> None:
        log.append(("general", item[1], None if mine is None else list(mine),
                    None if failed is None else str(failed)))

    got = outcome(module.answer_sends, items, given, failure, general)
    log.append(got if got[0] == "raised" else ("returned", got[1]))
    return log, [sink.count for sink in sinks]


@pytest.fixture(scope="module")
def fast():
    return compiled("fmq.server.net._plain_sends_c")


@settings(max_examples=400, deadline=None)
@given(requests=REQUESTS, packed=st.booleans(), failed=st.booleans(),
       acknowledges=st.booleans())
def test_compiled_answer_sends_is_the_reference(fast, place, requests, packed, failed,
                                                acknowledges) -> None:
    failure = LogFailed("the log's fdatasync failed") if failed else None
    got = _run(fast, requests, packed, failure, acknowledges, place)
    assert got == _run(reference, requests, packed, failure, acknowledges, place)
    assert got[1] == [0, 0, 0]  # every plain send answered, counted out once


def _frames(data: bytes) -> list[bytes]:
    out, at = [], 0
    while at < len(data):
        end = at + 4 + struct.unpack_from(">I", data, at)[0]
        out.append(data[at:end])
        at = end
    return out


@settings(max_examples=200, deadline=None)
@given(requests=REQUESTS)
def test_the_framed_answers_are_the_codecs(place, requests) -> None:
    """Each answer framed from packed results is what the codec writes for that request's
    results (``encode_response`` of its reply): what the general way would send."""
    plain = [r for r in requests if r[0] is not None]
    log, _counts = _run(reference, [(0, *r[1:]) for r in plain], True, None, True, place)
    written = b"".join(entry[2] for entry in log if entry[1] == "written")
    want, pos = [], 0
    for _who, op, n, rid, _size in plain:
        n = 1 if op == Op.SEND else n
        mine = _packed(_results(pos + n)[pos:])
        reply = send_reply if op == Op.SEND else send_batch_reply
        want.append(bytes(encode_response(op, rid, reply(mine))))
        pos += n
    assert _frames(written) == want


def test_a_session_is_told_once_per_pass_and_general_answers_keep_the_order(fast, place
                                                                          ) -> None:
    """Plain sends of one session around a general request: what was framed before it is
    written before it is answered, the rest once at the end, with the counts."""
    requests = [(0, Op.SEND, 1, 5, 40), (0, Op.SEND, 1, 6, 41), (None, Op.SEND, 1, 7, 42),
                (0, Op.SEND_BATCH, 2, 8, 43)]
    for module in (reference, fast):
        log, counts = _run(module, requests, True, None, True, place)
        kinds = [entry[:2] if entry[0] != "general" else ("general",) for entry in log]
        assert kinds == [("s0", "acknowledges"), ("s0", "written"), ("general",),
                         ("s0", "written"), ("returned", None)]
        assert [(e[3], e[4]) for e in log if e[1:2] == ("written",)] == [(0, 0), (3, 124)]
        assert counts == [0, 0, 0]


#: A frame of a run: (opcode, what its payload holds, version, flags, request id).
_PAYLOADS = {
    "plain": send_payload("t", b"x" * 10, None, None, [], -1),
    "small": send_payload("small", b"x" * 100, "k", None, [("a", "1")], -1),
    "too large for small": send_payload("small", b"x" * 101, None, None, [], -1),
    "a deleted topic": send_payload("gone", b"x", None, None, [], -1),
    "a queue id": send_payload("t", b"x", None, None, [], 0),
    "over the broker's size": send_payload("t", b"x" * (MAX_SIZE + 1), None, None, [], -1),
    "cut short": send_payload("t", b"x" * 10, None, None, [], -1)[:-1],
}
FRAMES = st.lists(st.tuples(
    st.sampled_from([Op.SEND, Op.SEND, Op.SEND_BATCH, Op.PULL, Op.PING]),
    st.lists(st.sampled_from(sorted(_PAYLOADS)), min_size=1, max_size=4),
    st.sampled_from([PROTOCOL_VERSION] * 8 + [2]), st.sampled_from([0] * 8 + [1, 2]),
    st.sampled_from([1, 2, 2**64 - 1, 0])), max_size=10)


def _frame(op: int, kinds: list[str], version: int, flags: int, rid: int) -> Frame:
    if op == Op.SEND_BATCH:
        payload = batch_payload([_PAYLOADS[k] for k in kinds])
    else:
        payload = _PAYLOADS[kinds[0]]
    return Frame(version, int(op), flags, rid, payload)


def _take(module, frames: list[Frame], room: int, place: Place) -> tuple:
    """``take`` over the run as ``SessionRequests.start_frames`` calls it (a frame not
    taken is the general way's: the next call starts after it): where each call stopped,
    the entries queued, the counters, what the owner was told."""
    log: list = []
    counters = ServerCounters()
    plain = place.plain_sends(module, Owner("s", log, True), counters)
    place.batcher._sends.clear()
    stops, at = [], 0
    while at < len(frames):
        at = plain.take(frames, at, room)
        stops.append(at)
        at += 1
    queued = [(item[0], item[1], item[2] is plain, item[3], item[4], item[5])
              for item in place.batcher._sends]
    place.batcher._sends.clear()
    return (stops, queued, plain.count, counters.requests, counters.by_op[Op.SEND],
            counters.by_op[Op.SEND_BATCH], log)


@settings(max_examples=300, deadline=None)
@given(frames=FRAMES, room=st.sampled_from([0, 1, 3, 256]))
def test_compiled_take_is_the_reference(fast, place, frames, room) -> None:
    run = [_frame(*f) for f in frames]
    got = _take(fast, run, room, place)
    assert got == _take(reference, run, room, place)
    queued, count = got[1], got[2]
    assert count == len(queued) <= room
    # Taken: plain requests of a good header, each with its frame's bytes.
    for messages, future, own, rid, op, _size in queued:
        assert future is None and own and rid != 0 and op in (Op.SEND, Op.SEND_BATCH)
        assert all(m.topic in ("t", "small") and len(m.body) <= 100 for m in messages)
    assert sum(item[5] for item in queued) == sum(e[2] for e in got[6]
                                                  if e[1] == "received")


def test_a_run_of_plain_sends_is_taken_in_one_call(fast, place) -> None:
    frames = [_frame(Op.SEND, ["plain"], PROTOCOL_VERSION, 0, rid) for rid in range(1, 6)]
    frames.insert(3, _frame(Op.SEND, ["a deleted topic"], PROTOCOL_VERSION, 0, 9))
    for module in (reference, fast):
        stops, queued, count, requests, sends, batches, log = _take(module, frames, 256, place)
        assert stops == [3, 6] and count == 5 and (requests, sends, batches) == (5, 5, 0)
        assert [item[3] for item in queued] == [1, 2, 3, 4, 5]
        assert log == [("s", "received", 3 * (12 + len(_PAYLOADS["plain"]))),
                       ("s", "received", 2 * (12 + len(_PAYLOADS["plain"])))]
