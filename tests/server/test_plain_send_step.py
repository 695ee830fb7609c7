"""A plain SEND's or SEND_BATCH's short step (``PlainSends.take`` and ``answer_sends``) against the general way
(``SessionRequests.plain_sends = False``, every request through ``_start``): the same
SEND and SEND_BATCH frames, valid and invalid (topic names, body sizes against the broker's and a topic's
``max_message_size``, keys, tags, properties, queue ids, a deleted topic, malformed
payloads, bad headers), sent to a fresh server of each way (a real ``Server`` on
127.0.0.1 in this process, its real broker), get byte for byte the same answers, and leave
the same stored messages. The step must really have taken the plain ones (counted), or
the comparison would compare the general way with itself."""

from __future__ import annotations

import random
import struct

import pytest

from fmq.protocol import PROTOCOL_VERSION, Op
from fmq.server.net.session_requests import SessionRequests
from fmq.server.ops.batcher import SendBatcher
from tests.native.test_plain_send_twins import batch_payload, send_payload
from tests.server.raw_requests import answers_in_windows, answers_one_at_a_time, request_frame
from tests.server.send_servers import (
    GONE_TOPIC,
    MAX_SIZE,
    SMALL_TOPIC,
    answers_and_stored,
)

#: The class whose step the server runs.
_STEP_CLASS = SessionRequests

# The plain values more often than the others: most SENDs take the short step.
TOPICS = ["t"] * 4 + ["orders.eu", SMALL_TOPIC] * 2 + [
    GONE_TOPIC, "%RETRY%g", "", "a" * 127, "a" * 128, "bad topic", "é", "t\n"]
LABELS = [None] * 6 + ["", "k", "k\x00", "é" * 127, "é" * 128]
NAMES = ["a", "b"] * 4 + ["%producer", "%seq", "%msgid", "%principal", "é", "", "%"]


def _message(rnd: random.Random, fill: int) -> bytes:
    """A message struct near the checks' edges."""
    size = rnd.choice([0, 1, 99, 100, 101, MAX_SIZE - 1, MAX_SIZE, MAX_SIZE + 1])
    properties = [(rnd.choice(NAMES), rnd.choice(["", "v", "1", "é"]))
                  for _ in range(rnd.choice([0, 0, 1, 2, 3]))]
    return send_payload(rnd.choice(TOPICS), bytes([fill]) * size, rnd.choice(LABELS),
                        rnd.choice(LABELS), properties,
                        rnd.choice([-1] * 8 + [0, 1, 3, 4, -2]))


def _batched(rnd: random.Random, fill: int) -> bytes:
    """A message of a batch: most are plain, so that whole batches are."""
    if rnd.random() < 0.2:
        return _message(rnd, fill)
    return send_payload(rnd.choice(["t", SMALL_TOPIC]), bytes([fill]) * rnd.choice([1, 100, 101]),
                        None, rnd.choice([None, "x"]), [("a", "1")], -1)


def _requests(seed: int, count: int, intact: bool = False) -> list[bytes]:
    """SEND and SEND_BATCH frames near every check's edge, valid ones among them (request
    ids 1..); ``intact``: none malformed and no bad header (no session is closed)."""
    rnd = random.Random(seed)
    frames = []
    for rid in range(1, count + 1):
        op = Op.SEND
        if rnd.random() < 0.3:  # a SEND_BATCH of 0-3 messages (max_batch_messages is 2)
            op = Op.SEND_BATCH
            payload = batch_payload([_batched(rnd, rid % 256)
                                     for _ in range(rnd.choice([0, 1, 2, 2, 3]))])
        else:
            payload = _message(rnd, rid % 256)
        how = rnd.random() if not intact else 1.0
        if how < 0.05:  # cut short: malformed, the session closes
            payload = payload[:rnd.randrange(len(payload))]
        elif how < 0.08:  # trailing bytes: malformed too
            payload += b"\x00"
        header = {"version": PROTOCOL_VERSION, "flags": 0}
        if rnd.random() < 0.03 and not intact:
            header = rnd.choice([{"version": 2, "flags": 0},
                                 {"version": PROTOCOL_VERSION, "flags": 1}])
        frames.append(request_frame(payload, rid, op=op, **header))
    return frames


@pytest.mark.parametrize("seed", [1, 2])
def test_plain_sends_are_answered_and_stored_as_the_general_way_does(tmp_path, monkeypatch,
                                                                     seed):
    frames = _requests(seed, 400)
    taken = []  # the opcode of each request the step took
    place = SendBatcher._place_turn

    def counted(self):
        # The step's entries have no future: (messages, None, plain, id, opcode, bytes).
        taken.extend(item[4] for item in self._sends if item[1] is None)
        return place(self)

    monkeypatch.setattr(SendBatcher, "_place_turn", counted)

    def serve(name: str) -> tuple[list[bytes], list[tuple]]:
        return answers_and_stored(str(tmp_path / name),
                                  lambda server: answers_one_at_a_time(server.port, frames))

    fast = serve("fast")
    monkeypatch.setattr(SessionRequests, "plain_sends", False)
    general = serve("general")
    assert taken.count(Op.SEND) > 20 and taken.count(Op.SEND_BATCH) > 5, \
        "the short step took too few plain requests to compare"
    assert fast[0] == general[0]
    assert fast[1] == general[1] and len(fast[1]) >= len(taken) // 2
    # Some of each ending: stored, refused with an error, and sessions closed.
    assert any(a[1] == 1 for a in fast[0]) and any(a[1] & 2 for a in fast[0])
    assert any(a.endswith(b"|closed") for a in fast[0])


@pytest.mark.parametrize("seed", [3, 4])
def test_pipelined_plain_sends_are_answered_and_stored_as_the_general_way_does(
        tmp_path, monkeypatch, seed):
    """Windows of 16 requests on one connection: placement packs the results of a turn's
    sends, and the step frames their answers from them into the session's answers
    (fmq.server.net.plain_sends.answer_sends, written by SessionRequests.plain_written); the
    same answers, request by request, and the same stored messages as the general way."""
    frames = _requests(seed, 480, intact=True)
    framed = []  # the opcode of each answer the step framed from packed results
    written = _STEP_CLASS.plain_written

    def counted(self, data, ended, size):
        at = 0
        while at < len(data):  # the framed answers, one after the other
            framed.append(data[at + 5])
            at += 4 + struct.unpack_from(">I", data, at)[0]
        return written(self, data, ended, size)

    monkeypatch.setattr(_STEP_CLASS, "plain_written", counted)

    def serve(name: str) -> tuple[dict[int, bytes], list[tuple]]:
        return answers_and_stored(str(tmp_path / name),
                                  lambda server: answers_in_windows(server.port, frames, 16))

    fast = serve("fast")
    monkeypatch.setattr(_STEP_CLASS, "plain_sends", False)
    general = serve("general")
    assert framed.count(Op.SEND) > 20 and framed.count(Op.SEND_BATCH) > 5, \
        "the step framed too few answers from packed results to compare"
    assert len(fast[0]) == len(frames)
    assert fast[0] == general[0]
    assert fast[1] == general[1] and len(fast[1]) > 100
    assert any(a[1] == 1 for a in fast[0].values()) and any(
        a[1] & 2 for a in fast[0].values())
