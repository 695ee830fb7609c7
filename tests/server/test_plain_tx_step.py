"""PREPARE and COMMIT on the short step (``SessionRequests._start_plain_tx``, placed a
turn's kind at a time by ``TxWriter.place_prepares``/``place_commits``) against the general
way (``SessionRequests.plain_tx = False``: every request through ``_start``, the handler and
``tx_ops``): the same PREPARE and COMMIT frames, valid and invalid (producer groups and ids
near the name rules, messages plain and not, messages over a topic's size, empty and
oversized transactions, retried prepares of an id with the same messages and with others,
commits of unknown, open and committed ids, malformed payloads, bad headers), sent to a
fresh server of each way (a real ``Server`` on 127.0.0.1 in this process, its real
broker), one at a time and in pipelined windows, get byte for byte the same answers and
leave the same stored messages. A COMMIT of an id the broker made names the id this
server's answer gave. The
step must really have taken the requests (counted), or the comparison would compare the
general way with itself."""

from __future__ import annotations

import itertools
import random
import struct
import time

import pytest

from fmq.protocol import PROTOCOL_VERSION, Op
from fmq.server.net.session_requests import _DECLINED, SessionRequests
from fmq.server.server import Server
from fmq.tx import ids
from tests.native.test_plain_send_twins import send_payload
from tests.server.raw_requests import closed_after_error, open_session, read_answer, request_frame
from tests.server.send_servers import GONE_TOPIC, MAX_SIZE, SMALL_TOPIC, answers_and_stored

GROUPS = ["g"] * 16 + ["h", "", "%g", "a" * 255, "a" * 256, "g\x00", "é"]
#: Ids a test chooses (retried, committed twice, unknown), and ids the broker makes.
IDS = ["t1", "t2", "t3", "t4", "", "b" * 256, "x\x00"]
MADE = "made"


def _str(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack(">H", len(data)) + data


def _optstr(text: str | None) -> bytes:
    return b"\xff\xff" if text is None else _str(text)


def _message(rnd: random.Random) -> bytes:
    """A message struct, most of them plain (the step takes those only)."""
    if rnd.random() < 0.9:
        return send_payload(rnd.choice(["t", "orders.eu", SMALL_TOPIC]), b"m" * rnd.choice(
            [1, 100, 101, 1024]), rnd.choice([None, None, "k"]), rnd.choice([None, "x"]),
            [("a", "1")] * rnd.choice([0, 1]), -1)
    return send_payload(rnd.choice(["t", GONE_TOPIC, "%RETRY%g", "", "bad topic"]),
                        b"n" * rnd.choice([0, MAX_SIZE, MAX_SIZE + 1]),
                        rnd.choice([None, "k\x00"]), None,
                        [(rnd.choice(["a", "%seq", "é"]), "v")], rnd.choice([-1, 0, 9]))


def _specs(seed: int, count: int, intact: bool = False) -> list[tuple]:
    """Requests as (opcode, header, payload parts) with request ids 1..; a COMMIT of an id
    the broker made names it ``(MADE, n)``: the n-th server-made id, resolved per server.
    ``intact``: none malformed and no bad header (no session is closed)."""
    rnd = random.Random(seed)
    specs = []
    made = 0
    for _ in range(count):
        header = {"version": PROTOCOL_VERSION, "flags": 0}
        if rnd.random() < 0.03 and not intact:
            header = rnd.choice([{"version": 2, "flags": 0},
                                 {"version": PROTOCOL_VERSION, "flags": 1}])
        if rnd.random() < 0.55:
            tx_id = None if rnd.random() < 0.5 else rnd.choice(IDS)
            if tx_id is None:
                made += 1
            n = rnd.choice([1, 1, 1, 1, 1, 2, 3, 0, 5])  # max_messages_per_transaction is 4
            messages = [_message(rnd) for _ in range(n)]
            if tx_id is not None and rnd.random() < 0.5:  # a retry with the same messages
                messages = [send_payload("t", b"r" * 100, None, None, [], -1)]
            payload = (_str(rnd.choice(GROUPS)) + _optstr(tx_id)
                       + struct.pack(">I", len(messages))
                       + b"".join(messages))
            specs.append((Op.PREPARE, header, payload if intact else _cut(rnd, payload)))
        else:
            tx_id = ((MADE, rnd.randrange(made)) if made and rnd.random() < 0.6
                     else rnd.choice(IDS))
            specs.append((Op.COMMIT, header, (rnd.choice(GROUPS[:18]), tx_id,
                                              rnd.random() < 0.03 and not intact)))
    return specs


def _cut(rnd: random.Random, payload: bytes) -> bytes:
    how = rnd.random()
    if how < 0.03:  # cut short: malformed, the session closes
        return payload[:rnd.randrange(len(payload))]
    if how < 0.05:  # trailing bytes: malformed too
        return payload + b"\x00"
    return payload


def _frame_of(specs: list[tuple], made: list[str], rid: int, at: int) -> bytes:
    """The frame of ``specs[at]`` (request id ``rid``), a server-made id taken from this
    server's ``made`` ids."""
    op, header, payload = specs[at]
    if op == Op.COMMIT:
        group, tx_id, trailing = payload
        if type(tx_id) is tuple:
            tx_id = made[tx_id[1]] if tx_id[1] < len(made) else "never-made"
        payload = _str(group) + _str(tx_id) + (b"\x00" if trailing else b"")
    return request_frame(payload, rid, op=op, **header)


def _normalised(answer: bytes, made: list[str], op: int) -> bytes:
    """``answer``, a server-made id in it noted in ``made``."""
    if op == Op.PREPARE and len(answer) > 12 and not answer[1] & 2:
        tx_id = answer[12:].decode()
        if tx_id not in IDS:
            made.append(tx_id)
    return answer


def _one_at_a_time(server: Server, specs: list[tuple]) -> list[bytes]:
    """Each request's answer, sent one at a time; after an error answer a PING tells
    whether the server closed the session (then the next goes on a new connection)."""
    out: list[bytes] = []
    made: list[str] = []
    sock = decoder = None
    for at, (op, _h, _p) in enumerate(specs):
        _indexed(server)
        if sock is None:
            sock, decoder = open_session(server.port)
        data = _frame_of(specs, made, at + 1, at)
        sock.sendall(data)
        answer = read_answer(sock, decoder)
        if answer is not None and answer[1] & 2:
            answer += b"|closed" if closed_after_error(sock, decoder) else b"|open"
        if answer is None or answer.endswith(b"|closed"):
            answer = answer or b"|closed"
            sock.close()
            sock = None
        out.append(_normalised(answer, made, op))
    if sock is not None:
        sock.close()
    return out


def _indexed(server: Server) -> None:
    """Wait until the index holds what was answered: a retried PREPARE of a transaction
    committed since is found by the index's record of its end, so its answer depends on
    the index's lag (either way alike); the comparison needs it not to."""
    assert server.broker.wait_indexed(30), "the index did not catch up"


def _windows(server: Server, specs: list[tuple], window: int) -> dict[int, bytes]:
    """Each request's answer by request id, ``window`` requests written at once on one
    connection (a COMMIT names only ids made in earlier windows)."""
    answers: dict[int, bytes] = {}
    made: list[str] = []
    sock, decoder = open_session(server.port)
    with sock:
        for start in range(0, len(specs), window):
            _indexed(server)
            ats = range(start, min(start + window, len(specs)))
            sock.sendall(b"".join(_frame_of(specs, made, at + 1, at) for at in ats))
            deadline = time.monotonic() + 60
            got: dict[int, bytes] = {}
            while len(got) < len(ats) and time.monotonic() < deadline:
                chunk = sock.recv(1 << 16)
                assert chunk, "the server closed a session no frame of which was malformed"
                for frame in decoder.feed(chunk):
                    got[frame.request_id] = (bytes([frame.opcode, frame.flags])
                                             + struct.pack(">Q", frame.request_id)
                                             + bytes(frame.payload))
            assert len(got) == len(ats), "a window's answers did not all come"
            for rid in sorted(got):  # made ids numbered in request order, on both ways
                answers[rid] = _normalised(got[rid], made, specs[rid - 1][0])
    return answers


def _counted(monkeypatch) -> list[int]:
    """The opcodes the short step took (did not decline)."""
    taken: list[int] = []
    step = SessionRequests._start_plain_tx

    def counted(self, frame):
        request = step(self, frame)
        if request is not _DECLINED:
            taken.append(frame.opcode)
        return request

    monkeypatch.setattr(SessionRequests, "_start_plain_tx", counted)
    return taken


def _both_ways(tmp_path, monkeypatch, drive, **config: object
               ) -> tuple[tuple, tuple, list[int]]:
    taken = _counted(monkeypatch)
    ways = []
    for name in ("step", "general"):
        if name == "general":
            monkeypatch.setattr(SessionRequests, "plain_tx", False)
        # The broker's ids count up in this process: both ways count from the same start,
        # so their ids, and the records that hold them, are alike.
        monkeypatch.setattr(ids, "_tx_seq", itertools.count(1))
        data_dir = str(tmp_path / name)
        ways.append(answers_and_stored(data_dir, drive, max_messages_per_transaction=4,
                                       **config))
    return ways[0], ways[1], taken


@pytest.mark.parametrize("seed", [1, 2])
def test_prepares_and_commits_are_answered_and_stored_as_the_general_way_does(
        tmp_path, monkeypatch, seed):
    specs = _specs(seed, 300)
    step, general, taken = _both_ways(tmp_path, monkeypatch,
                                      lambda server: _one_at_a_time(server, specs))
    assert taken.count(Op.PREPARE) > 40 and taken.count(Op.COMMIT) > 40, \
        "the short step took too few requests to compare"
    assert step[0] == general[0]
    assert step[1] == general[1] and len(step[1]) > 10
    answers = step[0]
    # Some of each ending: prepared, committed, refused with an error, sessions closed.
    assert any(a[0] == Op.PREPARE and a[1] == 1 for a in answers)
    assert any(a[0] == Op.COMMIT and a[1] == 1 for a in answers)
    assert sum(1 for a in answers if a[1] & 2) > 20
    assert any(a.endswith(b"|closed") for a in answers)


@pytest.mark.parametrize("seed", [3, 4])
def test_pipelined_prepares_and_commits_are_answered_as_the_general_way_does(
        tmp_path, monkeypatch, seed):
    """Windows of 16 on one connection: the turn's PREPAREs (COMMITs) placed by one call
    of the writer, each failing alone."""
    specs = _specs(seed, 480, intact=True)
    step, general, taken = _both_ways(tmp_path, monkeypatch,
                                      lambda server: _windows(server, specs, 16))
    assert taken.count(Op.PREPARE) > 80 and taken.count(Op.COMMIT) > 80
    assert len(step[0]) == len(specs)
    assert step[0] == general[0]
    assert step[1] == general[1] and len(step[1]) > 20
    assert sum(1 for a in step[0].values() if a[1] & 2) > 20


def test_pipelined_windows_in_small_segments_are_answered_as_the_general_way_does(
        tmp_path, monkeypatch):
    """Windows of 16 in segments of 8 KiB: many a turn's PREPAREs do not surely fit in the
    active segment (placed one request at a time, each with its reservation) and many a
    turn's runs roll part way, and commits find their PRE_MESSAGEs in an older segment
    (copies, one at a time); the answers and stored messages are still the general way's."""
    specs = _specs(5, 480, intact=True)
    step, general, taken = _both_ways(tmp_path, monkeypatch,
                                      lambda server: _windows(server, specs, 16),
                                      segment_size=8192)
    assert taken.count(Op.PREPARE) > 80 and taken.count(Op.COMMIT) > 80
    assert len(step[0]) == len(specs)
    assert step[0] == general[0]
    assert step[1] == general[1] and len(step[1]) > 20
