"""The server's memory budgets and connection time-outs against hostile clients (a real
``fmq server`` subprocess on 127.0.0.1): clients that never read their answers, answers
swollen by properties, frames left unfinished, slow-loris connections.

Memory is checked on the server process itself (its peak RSS, ``VmHWM``) and on the server's
own counters (``stats()["server"]``); nothing asserts on speed.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pytest

from fmq import Broker, BrokerConfig
from fmq.client import Client, Producer
from fmq.errors import ConfigError, FMQError
from fmq.message import Message, StoredMessage
from fmq.protocol import PREFIX_SIZE, FrameDecoder, Op, decode_response, encode_request
from fmq.protocol.frame import encode_response
from fmq.protocol.values import stored_from_wire, stored_to_wire
from fmq.server.config import ServerConfig
from fmq.server.net.budgets import SharedBudget
from fmq.server.net.replies import PULL_REPLY_BASE, QUERY_REPLY_BASE, stored_message_size
from fmq.server.server import Server

from .conftest import FAST
from .harness import closed_by_server, server_stats

MiB = 1024 * 1024


def raw(address: str, timeout: float = 5.0) -> socket.socket:
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout)
    s.settimeout(timeout)
    return s


def peak_rss(pid: int) -> int:
    """The process's peak resident set size, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


#: Request bytes the STATS request asking for the counters holds itself.
STATS_REQUEST = 12


def read_frames(s: socket.socket, count: int, limit: float = 60.0) -> list:
    dec = FrameDecoder(1 << 30)
    frames: list = []
    deadline = time.monotonic() + limit
    while len(frames) < count and time.monotonic() < deadline:
        data = s.recv(1 << 20)
        if not data:
            break
        frames.extend(dec.feed(data))
    return frames


def pull_request(rid: int, topic: str, offset: int = 0, max_messages: int = 4096) -> bytes:
    return encode_request(Op.PULL, rid, {"topic": topic, "queue_id": 0, "offset": offset,
                                         "max_messages": max_messages, "wait_ms": 0})


# ---------------------------------------------------------------- units


def test_answer_sizes_count_every_field_exactly():
    rnd = random.Random(7)
    for _ in range(200):
        m = StoredMessage(
            "t" * rnd.randint(1, 127), rnd.randint(0, 65535), rnd.randint(0, 1 << 40),
            rnd.randint(0, 1 << 40), bytes(rnd.randint(0, 3000)),
            rnd.choice([None, "", "k\u00e9y" * rnd.randint(1, 60)]),
            rnd.choice([None, "tag\u20ac" * rnd.randint(1, 40)]),
            {f"p{i}\u00fc": "v" * rnd.randint(0, 300) for i in range(rnd.randint(0, 20))},
            rnd.randint(0, 1 << 41))
        n = rnd.randint(0, 3)
        pull = encode_response(Op.PULL, 1, {"messages": [stored_to_wire(m)] * n,
                                            "min_offset": 0, "next_offset": 0})
        query = encode_response(Op.QUERY_KEY, 1, {"messages": [stored_to_wire(m)] * n})
        assert len(pull) == PULL_REPLY_BASE + n * stored_message_size(m)
        assert len(query) == QUERY_REPLY_BASE + n * stored_message_size(m)


def test_shared_budget_first_come_first_served_and_per_connection():
    budget = SharedBudget("t", total=100, per_connection=60)
    a, b, c = budget.share(), budget.share(), budget.share()
    assert budget.try_take(a, 50, 50) == 50
    assert budget.try_take(a, 20, 20) == 0  # a's own limit
    granted: list = []
    budget.wait(a, 20, 20, lambda n: granted.append(("a", n)))
    assert budget.try_take(b, 10, 60) == 50  # the rest of the total
    budget.wait(c, 30, 30, lambda n: granted.append(("c", n)))
    assert budget.try_take(c, 1, 1) == 0  # c waits for the total: nobody jumps the queue
    budget.release(b, 50)
    assert granted == [("c", 30)]  # a still waits for its own connection
    budget.release(a, 50)
    assert granted == [("c", 30), ("a", 20)]
    assert budget.used == 50 and budget.peak == 100


@pytest.mark.parametrize("changes, match", [
    ({"request_budget_per_connection": 1 * MiB}, "at least max_frame_size"),
    ({"request_budget_total": 32 * MiB}, "request_budget_total"),
    ({"max_reply_size": 1000}, "max_reply_size"),
    ({"reply_budget_per_connection": 4 * MiB}, "at least max_reply_size"),
    ({"reply_budget_total": 16 * MiB}, "reply_budget_total"),
    ({"max_pending_connections": 0}, "max_pending_connections"),
    ({"handshake_timeout_ms": 0}, "handshake_timeout_ms"),
    ({"idle_timeout_ms": -1}, "idle_timeout_ms"),
])
def test_limit_fields_are_validated(changes, match):
    with pytest.raises(ConfigError, match=match):
        ServerConfig(**changes)


def test_reply_budget_must_hold_the_largest_message(tmp_path):
    with Broker.open(str(tmp_path / "d"), BrokerConfig(max_message_size=40 * MiB,
                                                       segment_size=64 * MiB)) as broker:
        with pytest.raises(ConfigError, match="reply_budget_per_connection"):
            Server(broker, ServerConfig())
        srv = Server(broker, ServerConfig(reply_budget_per_connection=48 * MiB))
        srv.workers.shutdown()
        srv.pollers.shutdown()


# ---------------------------------------------------------------- reply budget


REPLY_LIMITS = dict(FAST, server=dict(FAST["server"], reply_budget_per_connection=16 * MiB,
                                      reply_budget_total=24 * MiB, write_timeout_ms=60_000))


def test_pipelined_big_pulls_never_read_stay_within_the_reply_budget(start_server):
    """Two clients pipeline 32 PULLs of 8 MiB answers each and read nothing: the answers
    the server holds stay within reply_budget_total, and every answer arrives once the
    clients read."""
    srv = start_server(REPLY_LIMITS)
    bodies = [bytes([i]) * (256 * 1024) for i in range(48)]  # 12 MiB in one queue
    with Producer(srv.address) as p:
        for i in range(0, 48, 8):
            p.send_batch([Message("big", b, queue_id=0) for b in bodies[i:i + 8]])
    before = peak_rss(srv.proc.pid)
    pulls = 32
    clients = [raw(srv.address, timeout=30) for _ in range(2)]
    for s in clients:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.sendall(b"".join(pull_request(i, "big") for i in range(1, pulls + 1)))
    # Old behaviour: every accepted PULL buffered its 8 MiB answer (512 MiB here).
    deadline = time.monotonic() + 8
    growth = 0
    while time.monotonic() < deadline:
        growth = peak_rss(srv.proc.pid) - before
        assert growth < 160 * MiB, f"server grew by {growth / MiB:.0f} MiB"
        time.sleep(0.2)
    stats = server_stats(srv.address)
    assert stats["reply_bytes_peak"] <= 24 * MiB + 64 * 1024  # small answers are not reserved
    assert stats["reply_budget_waiting"] > 0  # the rest wait for their budget
    print(f"server peak RSS growth {growth / MiB:.1f} MiB, reply bytes peak "
          f"{stats['reply_bytes_peak'] / MiB:.1f} MiB")

    # Now they read: every answer arrives, each within max_reply_size, starting at offset 0.
    results: dict[int, list] = {}

    def read(k: int) -> None:
        results[k] = read_frames(clients[k], pulls)

    threads = [threading.Thread(target=read, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for frames in results.values():
        assert len(frames) == pulls and not any(f.is_error for f in frames)
        for f in frames:
            assert 16 + len(f.payload) <= 8 * MiB
            msgs = decode_response(f)["messages"]
            assert msgs and msgs[0]["body"] == bodies[0]
            assert [m["body"] for m in msgs] == bodies[:len(msgs)]
    for s in clients:
        s.close()
    deadline = time.monotonic() + 10
    while server_stats(srv.address)["reply_bytes"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server_stats(srv.address)["reply_bytes"] == 0


def test_a_peer_that_never_reads_is_closed_after_write_timeout(start_server):
    srv = start_server(dict(REPLY_LIMITS, server=dict(REPLY_LIMITS["server"],
                                                      write_timeout_ms=1500)))
    with Producer(srv.address) as p:
        p.send_batch([Message("big", bytes(512 * 1024), queue_id=0) for _ in range(16)])
    with raw(srv.address) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.sendall(b"".join(pull_request(i, "big") for i in range(1, 9)))
        time.sleep(4)  # 1.5 s without draining, plus the watchdog's tick
        assert closed_by_server(s, 10)
    deadline = time.monotonic() + 10
    while server_stats(srv.address)["reply_bytes"] and time.monotonic() < deadline:
        time.sleep(0.1)
    stats = server_stats(srv.address)
    assert stats["reply_bytes"] == 0 and stats["timed_out"] >= 1
    assert "write_timeout_ms" in srv.log()


def test_properties_keys_and_tags_count_against_the_answer_size(start_server):
    """Small bodies with 60 KiB of properties, long keys and tags: the answer stays within
    max_reply_size (the old budget counted bodies only), the Python client reads it, and a
    message larger than max_reply_size still comes alone."""
    srv = start_server(dict(FAST, server=dict(FAST["server"], max_reply_size=1 * MiB)))
    props = {f"p{i:03}": "v" * 590 for i in range(100)}  # about 60 KiB encoded
    key, tags = "k" * 255, "t" * 255
    with Producer(srv.address) as p:
        for i in range(0, 64, 16):
            p.send_batch([Message("props", f"m{j}".encode(), key=key, tags=tags,
                                  properties=props, queue_id=0) for j in range(i, i + 16)])
        p.send("props", b"x" * (2 * MiB), key=key, queue_id=0)  # alone beyond the limit
    got = []
    with Client(srv.address) as c:
        offset = 0
        while offset < 65:
            s = raw(srv.address)
            s.sendall(pull_request(1, "props", offset))
            (frame,) = read_frames(s, 1)
            s.close()
            answer = decode_response(frame)
            msgs = answer["messages"]
            assert msgs
            if offset < 64:
                assert PREFIX_SIZE + 12 + len(frame.payload) <= 1 * MiB, offset
            else:
                assert len(msgs) == 1 and len(msgs[0]["body"]) == 2 * MiB
            via_client = c.call(Op.PULL, {"topic": "props", "queue_id": 0, "offset": offset,
                                          "max_messages": 4096, "wait_ms": 0})
            assert via_client["messages"] == msgs
            got.extend(msgs)
            offset = msgs[-1]["queue_offset"] + 1
        assert [m["body"] for m in got[:64]] == [f"m{j}".encode() for j in range(64)]
        assert all(m["properties"] == props and m["key"] == key for m in got[:64])
        found = c.call(Op.QUERY_KEY, {"topic": "props", "key": key, "limit": 4096})
        sizes = [stored_message_size(stored_from_wire(m)) for m in found["messages"]]
        assert 1 <= len(sizes) < 65
        assert len(sizes) == 1 or QUERY_REPLY_BASE + sum(sizes) <= 1 * MiB


# ---------------------------------------------------------------- request budget


def test_unfinished_big_frames_stay_within_the_request_budget(start_server):
    """Sixteen connections each announce a 60 MiB frame and send 40 MiB of it: at most
    request_budget_total is admitted (the rest are not read), and a real client still
    works meanwhile."""
    srv = start_server(dict(FAST, server=dict(FAST["server"],
                                              request_budget_total=128 * MiB)))
    before = peak_rss(srv.proc.pid)
    declared = 60 * MiB
    head = struct.pack(">IBBHQ", declared, 1, int(Op.SEND_BATCH), 0, 1)
    chunk = bytes(MiB)
    socks = [raw(srv.address) for _ in range(16)]
    sent: dict[int, int] = {}

    def attack(k: int) -> None:
        s = socks[k]
        sent[k] = 0
        try:
            s.sendall(head)
            for _ in range(40):
                s.sendall(chunk)
                sent[k] += len(chunk)
        except OSError:
            pass  # the server does not read us (time-out) or closed us

    threads = [threading.Thread(target=attack, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    # A real client is not locked out meanwhile: small frames need no room in the budget.
    with Producer(srv.address, retries=0) as p:
        assert p.send("real", b"hello", queue_id=0).queue_offset == 0
    for t in threads:
        t.join(30)
    time.sleep(1)
    growth = peak_rss(srv.proc.pid) - before
    # Old behaviour: every connection's 40 MiB buffered (640 MiB).
    assert growth < 250 * MiB, f"server grew by {growth / MiB:.0f} MiB"
    stats = server_stats(srv.address)
    print(f"server peak RSS growth {growth / MiB:.1f} MiB; request bytes peak "
          f"{stats['request_bytes_peak'] / MiB:.1f} MiB")
    assert stats["request_bytes_peak"] <= 128 * MiB + 1 * MiB
    assert stats["request_budget_waiting"] > 0
    for s in socks:
        s.close()
    deadline = time.monotonic() + 10
    while server_stats(srv.address)["request_bytes"] > STATS_REQUEST and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    assert server_stats(srv.address)["request_bytes"] == STATS_REQUEST
    with Producer(srv.address) as p:
        assert p.send("real", b"again", queue_id=0).queue_offset == 1


# ---------------------------------------------------------------- time-outs


LORIS = dict(FAST, server=dict(FAST["server"], max_connections=64, max_pending_connections=32,
                               handshake_timeout_ms=1500, read_timeout_ms=1500,
                               idle_timeout_ms=3000))


def test_slow_loris_connections_do_not_lock_real_clients_out(start_server):
    """300 connections each send half a frame header. A real client still connects and
    works at once, and every half-open connection is closed within the handshake time-out."""
    srv = start_server(LORIS)
    loris = []
    for _ in range(300):
        s = raw(srv.address)
        s.sendall(b"\x00\x00")
        loris.append(s)
    with Producer(srv.address, retries=0, connect_timeout=5, request_timeout=5) as p:
        assert p.send("real", b"works").queue_offset == 0
    closed = sum(closed_by_server(s, 0.05) for s in loris)
    deadline = time.monotonic() + 15
    for s in loris:
        closed_by_server(s, max(0.05, deadline - time.monotonic()))
    assert all(closed_by_server(s, 0.05) for s in loris)
    for s in loris:
        s.close()
    stats = server_stats(srv.address)
    assert stats["pending_connections"] == 0 and stats["timed_out"] >= 300
    print(f"{closed} half-open connections closed to make room at once, all 300 within 15 s")
    assert "max_pending_connections" in srv.log()
    assert "handshake_timeout_ms" in srv.log()


def test_incomplete_frames_and_idle_connections_are_closed(start_server):
    srv = start_server(LORIS)
    stalled, idle, busy = raw(srv.address), raw(srv.address), raw(srv.address)
    for s in (stalled, idle, busy):
        s.sendall(encode_request(Op.PING, 1, {}))
        assert read_frames(s, 1)
    stalled.sendall(encode_request(Op.PING, 2, {})[:10])  # the rest never comes
    # A long poll in flight is not idleness: renewed until the idle time-out has passed.
    deadline = time.monotonic() + 4
    rid = 10
    while time.monotonic() < deadline:
        rid += 1
        busy.sendall(encode_request(Op.PULL, rid, {"topic": "none", "queue_id": 0,
                                                   "offset": 0, "max_messages": 1,
                                                   "wait_ms": 1000}))
        assert read_frames(busy, 1, limit=5)
    assert closed_by_server(stalled, 6)
    assert closed_by_server(idle, 6)
    busy.sendall(encode_request(Op.PING, 99, {}))
    assert read_frames(busy, 1)
    log = srv.log()
    assert "read_timeout_ms" in log and "idle_timeout_ms" in log
    for s in (stalled, idle, busy):
        s.close()
    try:
        with Client(srv.address, retries=0) as c:
            assert c.ping()["protocol_version"] == 1
    except FMQError as exc:  # pragma: no cover - the assertion says what went wrong
        raise AssertionError(f"the server stopped serving: {exc}") from None
