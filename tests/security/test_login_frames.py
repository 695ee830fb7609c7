"""Frames before log-in on a server with users (a real server on 127.0.0.1, raw sockets):
nothing larger than the log-in needs is received, so connections that never log in cannot
make the server hold large frames."""

from __future__ import annotations

import socket
import struct

import pytest

from fmq.client import Client, Producer
from fmq.errors import AuthenticationRequired
from fmq.protocol import FrameDecoder, Op, decode_error, encode_request
from fmq.server.net.request_admission import LOGIN_FRAME_LIMIT
from tests.server.harness import closed_by_server, server_stats
from tests.server.test_connection_close import (
    FRAME_LIMIT,
    SLACK,
    SMALL_BUDGET,
    STATS_REQUEST,
    cut_frames_growth,
    raw,
)

from .conftest import PASSWORD, add_users_and_base_rules

pytestmark = pytest.mark.timeout(180)
MiB = 1024 * 1024


@pytest.fixture
def small_budget_auth_server(tmp_path, secure_server):
    """A server with users admin and alice (BASE_RULES) and a 16 MiB frame limit."""
    add_users_and_base_rules(str(tmp_path / "data"))
    return secure_server(SMALL_BUDGET, {"user": "admin", "password": PASSWORD})


def test_frames_cut_off_before_log_in_leave_nothing_behind(small_budget_auth_server):
    """24 connections that never log in each announce a 16 MiB frame, send all of it but
    the last byte, and close: the server's memory stays near its request budget."""
    srv = small_budget_auth_server
    with Client(srv.address, user="admin", password=PASSWORD) as admin:
        def stats() -> dict:
            return server_stats(admin)

        seen, peak = cut_frames_growth(srv.address, srv.proc.pid, stats)
        print(f"RSS growth after a close at most {seen / MiB:.0f} MiB, peak growth "
              f"{peak / MiB:.0f} MiB")
        bound = 2 * FRAME_LIMIT + SLACK
        assert seen < bound, f"the server held {seen / MiB:.0f} MiB after closes"
        assert peak < bound, f"the server's peak grew by {peak / MiB:.0f} MiB"
        assert stats()["request_bytes"] == STATS_REQUEST


def test_a_large_frame_before_log_in_is_refused_at_once(small_budget_auth_server):
    """A frame announced larger than LOGIN_FRAME_LIMIT before log-in is answered
    AuthenticationRequired as soon as its length arrives, and the connection is closed; the
    same size after log-in is served."""
    srv = small_budget_auth_server
    with raw(srv.address) as s:
        decoder = FrameDecoder(1 << 20)
        s.settimeout(10)

        def answer() -> object:
            while True:
                data = s.recv(65536)
                assert data, "closed without an answer"
                frames = decoder.feed(data)
                if frames:
                    assert len(frames) == 1
                    return frames[0]

        s.sendall(encode_request(Op.PING, 1, {}))  # small frames before log-in are fine
        ping = answer()
        assert not ping.is_error and ping.request_id == 1
        s.sendall(struct.pack(">IBBHQ", LOGIN_FRAME_LIMIT + 1, 1, int(Op.SEND), 0, 2))
        refused = answer()
        assert refused.is_error and refused.request_id == 0
        exc = decode_error(refused)
        assert isinstance(exc, AuthenticationRequired)
        assert "before log-in" in str(exc) and str(LOGIN_FRAME_LIMIT) in str(exc)
        assert closed_by_server(s, 10)
    # Logged in, a frame of several MiB goes through.
    with Producer(srv.address, user="alice", password=PASSWORD) as p:
        assert p.send("big", bytes(4 * MiB), queue_id=0).queue_offset == 0
    assert not isinstance(srv.proc.poll(), int)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10):
        pass  # still accepting
