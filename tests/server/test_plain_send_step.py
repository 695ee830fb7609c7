"""A plain SEND's or SEND_BATCH's short step (``SessionRequests._start_plain_send``) against the general way
(``SessionRequests.plain_sends = False``, every request through ``_start``): the same
SEND and SEND_BATCH frames, valid and invalid (topic names, body sizes against the broker's and a topic's
``max_message_size``, keys, tags, properties, queue ids, a deleted topic, malformed
payloads, bad headers), sent to a fresh server of each way (a real ``Server`` on
127.0.0.1 in this process, its real broker), get byte for byte the same answers, and leave
the same stored messages. The step must really have taken the plain ones (counted), or
the comparison would compare the general way with itself."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time

import pytest

from fmq import Broker, BrokerConfig
from fmq.message import PackedResults
from fmq.protocol import PROTOCOL_VERSION, FrameDecoder, Op
from fmq.server.config import ServerConfig
from fmq.server.net.session_requests import _DECLINED, SessionRequests
from fmq.server.server import Server
from tests.native.test_plain_send_twins import batch_payload, send_payload

#: The class whose step the server runs.
_STEP_CLASS = SessionRequests

MAX_SIZE = 2048  # the broker's max_message_size
SMALL_TOPIC = "small"  # a topic whose own max_message_size is 100
GONE_TOPIC = "gone"  # a deleted topic


def _frame(payload: bytes, rid: int, version: int = PROTOCOL_VERSION, flags: int = 0,
           op: int = Op.SEND) -> bytes:
    return struct.pack(">IBBHQ", 12 + len(payload), version, op, flags, rid) + payload


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
        frames.append(_frame(payload, rid, op=op, **header))
    return frames


class ServerThread:
    """A real server on 127.0.0.1 in a thread of this process (so that the way it takes is
    this process's ``SessionRequests.plain_sends``)."""

    def __init__(self, data_dir: str, **config: object) -> None:
        broker = Broker.open(data_dir, BrokerConfig(max_message_size=MAX_SIZE, **config))
        broker.topics.create(SMALL_TOPIC, max_message_size=100)
        broker.topics.create(GONE_TOPIC)
        broker.topics.delete(GONE_TOPIC)
        self.server = Server(broker, ServerConfig(host="127.0.0.1", port=0,
                                                          max_batch_messages=2))
        self.started = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)
        self.thread.start()
        assert self.started.wait(60), "the server did not start"

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.server.start()
        self.started.set()
        await self.server.ctx.stop_requested.wait()
        await self.server.shutdown()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.request_stop)
        self.thread.join(60)
        assert not self.thread.is_alive(), "the server did not stop"


def _read_answer(sock: socket.socket, decoder: FrameDecoder) -> bytes | None:
    """The next answer frame (opcode, flags, request id, payload), None when the server
    closed the session instead."""
    deadline = time.monotonic() + 30
    frames: list = []
    while not frames and time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        frames = decoder.feed(chunk)
    assert len(frames) == 1, "one answer per request, one request at a time"
    frame = frames[0]
    return bytes([frame.opcode, frame.flags]) + struct.pack(">Q", frame.request_id) + bytes(
        frame.payload)


def _answers(port: int, frames: list[bytes]) -> list[bytes]:
    """Each frame's answer, sent one at a time; after an error answer a PING tells whether
    the server closed the session ("|closed": the next frame goes on a new connection)."""
    out: list[bytes] = []
    sock = decoder = None
    for data in frames:
        if sock is None:
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            decoder = FrameDecoder(1 << 24)
            # A first request (the session's first goes the general way, in both).
            sock.sendall(_frame(b"", 1 << 40, op=Op.PING))
            assert _read_answer(sock, decoder) is not None
        sock.sendall(data)
        answer = _read_answer(sock, decoder)
        if answer is not None and answer[1] & 2:
            try:
                sock.sendall(_frame(b"", 1 << 40, op=Op.PING))
                closed = _read_answer(sock, decoder) is None
            except (BrokenPipeError, ConnectionResetError):
                closed = True
            if not closed:
                answer += b"|open"
            else:
                answer = answer + b"|closed"
        if answer is None or answer.endswith(b"|closed"):
            answer = answer or b"|closed"
            sock.close()
            sock = None
        out.append(answer)
    if sock is not None:
        sock.close()
    return out


def _stored(data_dir: str) -> list[tuple]:
    with Broker.open(data_dir, BrokerConfig(max_message_size=MAX_SIZE)) as broker:
        broker.wait_indexed(30)
        stored = []
        for topic in ("t", "orders.eu", SMALL_TOPIC, "a" * 127):
            for queue in range(4):
                for m in broker.reads.pull(topic, queue, 0, 10_000):
                    stored.append((m.topic, m.queue_id, m.queue_offset, m.offset, m.body,
                                   m.key, m.tags, m.properties))
        return stored


def _serve(tmp_path, name: str, frames: list[bytes]) -> tuple[list[bytes], list[tuple]]:
    data_dir = str(tmp_path / name)
    srv = ServerThread(data_dir)
    try:
        answers = _answers(srv.server.port, frames)
    finally:
        srv.stop()
    return answers, _stored(data_dir)


@pytest.mark.parametrize("seed", [1, 2])
def test_plain_sends_are_answered_and_stored_as_the_general_way_does(tmp_path, monkeypatch,
                                                                     seed):
    frames = _requests(seed, 400)
    taken = []  # the opcode of each request the step took
    step = SessionRequests._start_plain_send

    def counted(self, frame):
        request = step(self, frame)
        if request is not _DECLINED:
            taken.append(frame.opcode)
        return request

    monkeypatch.setattr(SessionRequests, "_start_plain_send", counted)
    fast = _serve(tmp_path, "fast", frames)
    monkeypatch.setattr(SessionRequests, "plain_sends", False)
    general = _serve(tmp_path, "general", frames)
    assert taken.count(Op.SEND) > 20 and taken.count(Op.SEND_BATCH) > 5, \
        "the short step took too few plain requests to compare"
    assert fast[0] == general[0]
    assert fast[1] == general[1] and len(fast[1]) >= len(taken) // 2
    # Some of each ending: stored, refused with an error, and sessions closed.
    assert any(a[1] == 1 for a in fast[0]) and any(a[1] & 2 for a in fast[0])
    assert any(a.endswith(b"|closed") for a in fast[0])


def _pipelined_answers(port: int, frames: list[bytes], window: int) -> dict[int, bytes]:
    """Each frame's answer by request id, the frames written ``window`` at a time on one
    connection (a window's answers all read before the next is written)."""
    answers: dict[int, bytes] = {}
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        decoder = FrameDecoder(1 << 24)
        sock.sendall(_frame(b"", 1 << 40, op=Op.PING))
        assert _read_answer(sock, decoder) is not None
        for at in range(0, len(frames), window):
            sent = frames[at:at + window]
            sock.sendall(b"".join(sent))
            deadline = time.monotonic() + 60
            got = 0
            while got < len(sent) and time.monotonic() < deadline:
                chunk = sock.recv(1 << 16)
                assert chunk, "the server closed a session no frame of which was malformed"
                for frame in decoder.feed(chunk):
                    answers[frame.request_id] = (bytes([frame.opcode, frame.flags])
                                                 + bytes(frame.payload))
                    got += 1
            assert got == len(sent), "a window's answers did not all come"
    return answers


@pytest.mark.parametrize("seed", [3, 4])
def test_pipelined_plain_sends_are_answered_and_stored_as_the_general_way_does(
        tmp_path, monkeypatch, seed):
    """Windows of 16 requests on one connection: placement packs the results of a turn's
    sends, and the step frames its answers from them (SessionRequests._answer_plain); the
    same answers, request by request, and the same stored messages as the general way."""
    frames = _requests(seed, 480, intact=True)
    framed = []  # the opcode of each answer the step framed from packed results
    answer = _STEP_CLASS._answer_plain

    def counted(self, op, rid, reply, request):
        if type(request.result() if request.done() and not request.cancelled()
                and request.exception() is None else None) is PackedResults:
            framed.append(op)
        return answer(self, op, rid, reply, request)

    monkeypatch.setattr(_STEP_CLASS, "_answer_plain", counted)

    def serve(name: str) -> tuple[dict[int, bytes], list[tuple]]:
        data_dir = str(tmp_path / name)
        srv = ServerThread(data_dir)
        try:
            answers = _pipelined_answers(srv.server.port, frames, 16)
        finally:
            srv.stop()
        return answers, _stored(data_dir)

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
