"""What a connection leaves behind when it goes, and what it holds up when the server stops
(a real ``fmq server`` subprocess on 127.0.0.1, raw sockets).

Memory is checked on the server process itself (``VmRSS`` and its peak ``VmHWM`` in
/proc/PID/status) against the request budget; the stop is checked against a bound far from
the noise (a third of shutdown_grace_ms), not as a speed claim.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

import pytest

from fmq.client import Producer
from fmq.message import Message
from fmq.protocol import Op, encode_request

from .conftest import FAST
from .harness import server_stats

MiB = 1024 * 1024
#: Request bytes the STATS request asking for the counters holds itself.
STATS_REQUEST = 12


def raw(address: str, timeout: float = 10.0) -> socket.socket:
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout)
    s.settimeout(timeout)
    return s


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in bytes."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                out[name] = int(value.split()[0]) * 1024
    return out


# ---------------------------------------------------------------- frames cut off by a close

#: A small request budget keeps the test fast and the bound clear: one connection may hold
#: one 16 MiB frame, all of them together two.
FRAME_LIMIT = 16 * MiB
SMALL_BUDGET = dict(FAST, server=dict(FAST["server"], max_frame_size=FRAME_LIMIT,
                                      request_budget_per_connection=FRAME_LIMIT,
                                      request_budget_total=2 * FRAME_LIMIT))
CONNECTIONS = 24


def announce_and_close(address: str, declared: int) -> None:
    """Announce a frame of ``declared`` bytes, send all of it but its last byte, close."""
    head = struct.pack(">IBBHQ", declared, 1, int(Op.SEND_BATCH), 0, 1)
    with raw(address) as s:
        try:
            s.sendall(head + bytes(declared - 12 - 1))
        except OSError:
            pass  # refused before it was all sent: that is fine too


def cut_frames_growth(address: str, pid: int, stats: Callable[[], dict]) -> tuple[int, int]:
    """RSS growth (largest seen after a close, and peak) over CONNECTIONS connections that
    each announce a frame near max_frame_size and close one byte short of it. ``stats``:
    the server's counters (its STATS, asked by a client that may)."""
    before = memory(pid)
    seen = 0
    for _ in range(CONNECTIONS):
        announce_and_close(address, FRAME_LIMIT - 16)
        # The close has been handled once the budget has its bytes back.
        deadline = time.monotonic() + 20
        while stats()["request_bytes"] > STATS_REQUEST:
            assert time.monotonic() < deadline, "the request budget was not given back"
            time.sleep(0.02)
        seen = max(seen, memory(pid)["VmRSS"] - before["VmRSS"])
    return seen, memory(pid)["VmHWM"] - before["VmHWM"]


#: What the bound allows beyond the request budget: the server's own allocations while it
#: answers the STATS requests of the loop, and the allocator's slack.
SLACK = 32 * MiB


def on_loop(config: dict, event_loop: str) -> dict:
    return dict(config, server=dict(config["server"], event_loop=event_loop))


#: Both event loops the server runs on: their protocol callbacks are separate code.
EVENT_LOOPS = pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])


@EVENT_LOOPS
def test_frames_cut_off_by_a_close_are_dropped_at_once(start_server, event_loop):
    """24 connections one after another each announce a 16 MiB frame, send all of it but
    the last byte, and close: the server's memory stays near its request budget (32 MiB)
    instead of keeping every cut-off frame until its garbage collector runs (384 MiB)."""
    srv = start_server(on_loop(SMALL_BUDGET, event_loop))
    seen, peak = cut_frames_growth(srv.address, srv.proc.pid,
                                   lambda: server_stats(srv.address))
    print(f"RSS growth after a close at most {seen / MiB:.0f} MiB, peak growth "
          f"{peak / MiB:.0f} MiB")
    bound = 2 * FRAME_LIMIT + SLACK
    assert seen < bound, f"the server held {seen / MiB:.0f} MiB after closes"
    assert peak < bound, f"the server's peak grew by {peak / MiB:.0f} MiB"
    stats = server_stats(srv.address)
    assert stats["request_bytes"] == STATS_REQUEST
    assert stats["request_bytes_peak"] <= 2 * FRAME_LIMIT
    with Producer(srv.address) as p:  # still serving
        assert p.send("real", b"works", queue_id=0).queue_offset == 0


# ---------------------------------------------------------------- frames refused before they run


def refused_frames() -> dict[str, bytes]:
    """A frame for each refusal before a request runs, by what is wrong with it."""
    ping = encode_request(Op.PING, 1, {})
    bad_version = bytearray(ping)
    bad_version[4] = 99
    unknown_op = bytearray(ping)
    unknown_op[5] = 250
    return {"reserved id 0": encode_request(Op.PING, 0, {}),
            "unsupported version": bytes(bad_version), "unknown opcode": bytes(unknown_op)}


@pytest.mark.parametrize("what", sorted(refused_frames()))
def test_a_refused_frame_gives_its_request_bytes_back(start_server, what):
    """Every refusal before a request runs gives back the request budget its frame took
    (a request with the reserved id 0 once kept its bytes for the server's lifetime)."""
    srv = start_server(FAST)
    frame = refused_frames()[what]
    for _ in range(3):
        with raw(srv.address) as s:
            s.sendall(frame)
            assert s.recv(65536), "no error answer"  # handled: its bytes are back by now
    assert server_stats(srv.address)["request_bytes"] == STATS_REQUEST


# ---------------------------------------------------------------- a stop with a peer not reading

#: Eight 1 MiB messages: six PULLs of them fill the reply budget of one connection (its
#: socket takes little), so the next PULLs wait for reply room.
SLOW_READER = dict(FAST, server=dict(FAST["server"], shutdown_grace_ms=20_000,
                                     max_reply_size=8 * MiB,
                                     reply_budget_per_connection=32 * MiB,
                                     write_timeout_ms=120_000))


def pull(rid: int) -> bytes:
    return encode_request(Op.PULL, rid, {"topic": "big", "queue_id": 0, "offset": 0,
                                         "max_messages": 4096, "wait_ms": 0})


@EVENT_LOOPS
def test_a_stop_answers_requests_waiting_for_reply_room(start_server, event_loop):
    """A connection with a 4 KiB receive buffer sends 6 PULLs of 8 MiB answers and reads
    nothing: the PULLs waiting for reply room are answered ServerBusy at SIGTERM, so the
    server stops long before shutdown_grace_ms (20 s) instead of waiting it out."""
    srv = start_server(on_loop(SLOW_READER, event_loop))
    with Producer(srv.address) as p:
        p.send_batch([Message("big", bytes([i]) * MiB, queue_id=0) for i in range(8)])
    s = raw(srv.address)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(b"".join(pull(rid) for rid in range(1, 7)))
    deadline = time.monotonic() + 20
    while server_stats(srv.address)["reply_budget_waiting"] == 0:
        assert time.monotonic() < deadline, "no PULL waited for reply room"
        time.sleep(0.05)
    started = time.monotonic()
    code = srv.stop(timeout=60)
    took = time.monotonic() - started
    print(f"stopped in {took:.1f} s with exit code {code}")
    assert code == 0
    assert took < 10, f"the stop waited {took:.1f} s for a client that does not read"
    # The waiting PULLs were answered ServerBusy; the answers reach a peer only if it reads
    # what is queued before them, which this one never does (the process is gone meanwhile).
    assert "requests waiting for reply room ServerBusy" in srv.log()
    assert "abandoning" not in srv.log()
    s.close()
