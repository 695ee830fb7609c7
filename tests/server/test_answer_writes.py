"""A connection's answers of one hand-back of the send pipeline go out in one write
(fmq.server.net.answer_writes): 64 SENDs pipelined on one connection, placed together, are
answered with far fewer transport writes than answers (one each before), every answer
there, in a real server on 127.0.0.1; and a session closed while answers are held writes
them before it closes."""

from __future__ import annotations

import socket
import time

from fmq.protocol import FrameDecoder
from fmq.server.net import answer_writes
from fmq.server.net.session import ClientSession
from tests.native.test_plain_send_twins import send_payload
from tests.server.raw_requests import open_session, request_frame
from tests.server.send_servers import sends_server

WINDOW = 64


class CountingTransport:
    """The session's transport, its writes counted (everything else passed through)."""

    def __init__(self, transport, writes: list[int]) -> None:
        self._transport = transport
        self._writes = writes

    def write(self, data) -> None:
        self._writes.append(len(data))
        self._transport.write(data)

    def __getattr__(self, name):
        return getattr(self._transport, name)


def _counted_writes(monkeypatch) -> list[int]:
    """Every write of an answer: through the transport, or sent to the socket directly
    (``answer_writes.SEND_ANSWERS``, one per connection and flush; on the pure path there is
    none, and every answer goes through the transport)."""
    writes: list[int] = []
    made = ClientSession.connection_made
    send_answers = answer_writes.SEND_ANSWERS

    def connection_made(self, transport) -> None:
        made(self, transport)
        self.transport = CountingTransport(transport, writes)

    def counted_send_answers(fds, answers):
        taken = send_answers(fds, answers)
        writes.extend(n for n in taken if n)  # what none took goes through the transport
        return taken

    monkeypatch.setattr(ClientSession, "connection_made", connection_made)
    if send_answers is not None:
        monkeypatch.setattr(answer_writes, "SEND_ANSWERS", counted_send_answers)
    return writes


def _window_answers(sock: socket.socket, decoder: FrameDecoder, count: int) -> list:
    frames: list = []
    deadline = time.monotonic() + 60
    while len(frames) < count and time.monotonic() < deadline:
        chunk = sock.recv(1 << 16)
        assert chunk, "the server closed the session"
        frames += decoder.feed(chunk)
    return frames


def test_a_windows_answers_are_written_in_few_writes(tmp_path, monkeypatch) -> None:
    writes = _counted_writes(monkeypatch)
    srv = sends_server(str(tmp_path / "data"))
    try:
        sock, decoder = open_session(srv.port)
        with sock:
            before = len(writes)
            rounds = 4
            for r in range(rounds):
                sock.sendall(b"".join(
                    request_frame(send_payload("t", b"x" * 100, None, None, [], -1),
                                  r * WINDOW + i + 1)
                    for i in range(WINDOW)))
                answers = _window_answers(sock, decoder, WINDOW)
                assert sorted(f.request_id for f in answers) == list(
                    range(r * WINDOW + 1, (r + 1) * WINDOW + 1))
                assert all(f.flags == 1 and len(f.payload) == 20 for f in answers)
            # Each window is placed in a turn or a few, and flushed in a few hand-backs:
            # one write per hand-back, not per answer.
            assert len(writes) - before <= rounds * WINDOW // 8, writes[before:]
    finally:
        srv.stop()


def test_a_session_closed_while_answers_are_held_writes_them_first(tmp_path) -> None:
    """The peer half-closes after its window: the last answer closes the session inside
    the hand-back (its writes held), and every answer still arrives before the close."""
    srv = sends_server(str(tmp_path / "data"))
    try:
        sock, decoder = open_session(srv.port)
        with sock:
            sock.sendall(b"".join(
                request_frame(send_payload("t", b"y" * 10, None, None, [], -1), i + 1)
                for i in range(WINDOW)))
            sock.shutdown(socket.SHUT_WR)
            frames: list = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                frames += decoder.feed(chunk)
            assert sorted(f.request_id for f in frames) == list(range(1, WINDOW + 1))
            assert all(f.flags == 1 for f in frames)
    finally:
        srv.stop()
