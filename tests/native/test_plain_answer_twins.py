"""A flush's sends answered in one pass: ``answer_sends`` of the compiled twin
(``fmq.server.net._plain_sends_c``) against its reference (``fmq.server.net.plain_sends``).

The same placed batches (plain sends of several sessions mixed with the general way's
requests, SENDs and SEND_BATCHes, packed results or a list, a failure or none, a primary
that may acknowledge or not) give the same calls, in the same order, to each session's
owner and to the general way: the same answer bytes, the same sends counted out, the same
request bytes given back. And the reference's promise: each answer it frames is the wire's
answer of that request as the codec writes it (what the general way sends)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.errors import LogFailed
from fmq.message import PackedResults, SendResult
from fmq.protocol import Op, encode_response
from fmq.server.net import plain_sends as reference
from fmq.server.ops.handlers import send_batch_reply, send_reply
from tests.native.twins import compiled, outcome

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


def _run(module, requests: list[tuple], packed: bool, failure: BaseException | None,
         acknowledges: bool) -> tuple[list, list]:
    """What answering ``requests`` with ``module.answer_sends`` did: the log, and each
    session's count of sends in flight after it."""
    log: list = []
    sinks = [module.PlainSends(Owner(f"s{i}", log, acknowledges)) for i in range(3)]
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
def test_compiled_answer_sends_is_the_reference(fast, requests, packed, failed,
                                                acknowledges) -> None:
    failure = LogFailed("the log's fdatasync failed") if failed else None
    got = _run(fast, requests, packed, failure, acknowledges)
    assert got == _run(reference, requests, packed, failure, acknowledges)
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
def test_the_framed_answers_are_the_codecs(requests) -> None:
    """Each answer framed from packed results is what the codec writes for that request's
    results (``encode_response`` of its reply): what the general way would send."""
    plain = [r for r in requests if r[0] is not None]
    log, _counts = _run(reference, [(0, *r[1:]) for r in plain], True, None, True)
    written = b"".join(entry[2] for entry in log if entry[1] == "written")
    want, pos = [], 0
    for _who, op, n, rid, _size in plain:
        n = 1 if op == Op.SEND else n
        mine = _packed(_results(pos + n)[pos:])
        reply = send_reply if op == Op.SEND else send_batch_reply
        want.append(bytes(encode_response(op, rid, reply(mine))))
        pos += n
    assert _frames(written) == want


def test_a_session_is_told_once_per_pass_and_general_answers_keep_the_order(fast) -> None:
    """Plain sends of one session around a general request: what was framed before it is
    written before it is answered, the rest once at the end, with the counts."""
    requests = [(0, Op.SEND, 1, 5, 40), (0, Op.SEND, 1, 6, 41), (None, Op.SEND, 1, 7, 42),
                (0, Op.SEND_BATCH, 2, 8, 43)]
    for module in (reference, fast):
        log, counts = _run(module, requests, True, None, True)
        kinds = [entry[:2] if entry[0] != "general" else ("general",) for entry in log]
        assert kinds == [("s0", "acknowledges"), ("s0", "written"), ("general",),
                         ("s0", "written"), ("returned", None)]
        assert [(e[3], e[4]) for e in log if e[1:2] == ("written",)] == [(0, 0), (3, 124)]
        assert counts == [0, 0, 0]
