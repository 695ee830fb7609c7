"""Hostile bytes: malformed, truncated, oversize and random frames never crash the server,
never disturb other clients, never touch what is stored. And the limits hold."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import fmq
from fmq.client import Client, Consumer, Producer
from fmq.errors import FMQError, ProtocolError, ServerBusy
from fmq.protocol import FrameDecoder, Op, decode_error, decode_response, encode_request

from .conftest import FAST

LIMITS = dict(FAST, server=dict(FAST["server"], max_frame_size=65536, max_connections=6,
                                max_in_flight=4, max_wait_ms=1000))


def raw(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    s.settimeout(5)
    return s


def read_until_eof(s: socket.socket, limit: float = 5.0) -> tuple[list, bool]:
    """Frames received until the server closes (True) or ``limit`` passes (False); then
    closes ``s``, which is of no further use either way."""
    dec = FrameDecoder()
    frames = []
    deadline = time.monotonic() + limit
    with s:
        while time.monotonic() < deadline:
            try:
                data = s.recv(65536)
            except TimeoutError:
                break
            except ConnectionError:
                return frames, True
            if not data:
                return frames, True
            frames.extend(dec.feed(data))
    return frames, False


class Background:
    """A well-behaved producer that must see no error while others misbehave."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.acked: list[bytes] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self) -> None:
        with Producer(self.address, retries=0) as p:
            n = 0
            while not self.stop.is_set():
                n += 1
                try:
                    p.send("good", f"g{n}".encode())
                    self.acked.append(f"g{n}".encode())
                except FMQError as exc:
                    self.errors.append(exc)
                time.sleep(0.002)

    def finish(self, at_least: int = 50) -> None:
        deadline = time.monotonic() + 10  # let it overlap with the misbehaving clients
        while len(self.acked) < at_least and time.monotonic() < deadline and not self.errors:
            time.sleep(0.01)
        self.stop.set()
        self.thread.join(10)


def check_stored(address: str, acked: list[bytes]) -> None:
    got: set[bytes] = set()
    with Consumer(address, "verify", "good", start="earliest") as c:
        deadline = time.monotonic() + 20
        while not set(acked) <= got and time.monotonic() < deadline:
            got.update(m.body for m in c.poll(0.5))
    assert set(acked) <= got


def test_malformed_truncated_oversize_frames_close_only_that_connection(start_server):
    srv = start_server(LIMITS)
    good = Background(srv.address)
    try:
        # Oversize: refused from the length prefix alone, error with request id 0, closed.
        s = raw(srv.address)
        s.sendall(struct.pack(">I", 10_000_000))
        frames, closed = read_until_eof(s)
        assert closed and len(frames) == 1 and frames[0].request_id == 0
        err = decode_error(frames[0])
        assert isinstance(err, ProtocolError) and "max_frame_size" in str(err)

        # Length shorter than the header.
        s = raw(srv.address)
        s.sendall(struct.pack(">I", 3) + b"abc")
        frames, closed = read_until_eof(s)
        assert closed and isinstance(decode_error(frames[0]), ProtocolError)

        # Malformed payload (invalid UTF-8 in a str field): error for that id, then closed.
        s = raw(srv.address)
        body = struct.pack(">BBHQ", 1, Op.COMMIT, 0, 77) + b"\x00\x02\xff\xfe"
        s.sendall(struct.pack(">I", len(body)) + body)
        frames, closed = read_until_eof(s)
        assert closed and frames[0].request_id == 77 and frames[0].is_error
        assert "UTF-8" in str(decode_error(frames[0]))

        # Trailing garbage after a valid payload.
        s = raw(srv.address)
        s.sendall(encode_request(Op.PING, 5, {})[:4 - 4] + struct.pack(">I", 13)
                  + struct.pack(">BBHQ", 1, Op.PING, 0, 5) + b"x")
        frames, closed = read_until_eof(s)
        assert closed and frames[0].is_error

        # Unknown flag bits.
        s = raw(srv.address)
        s.sendall(struct.pack(">IBBHQ", 12, 1, Op.PING, 0x80, 6))
        frames, closed = read_until_eof(s)
        assert closed and frames[0].request_id == 0 and "flags" in str(decode_error(frames[0]))

        # Wrong protocol version.
        s = raw(srv.address)
        s.sendall(struct.pack(">IBBHQ", 12, 9, Op.PING, 0, 8))
        frames, closed = read_until_eof(s)
        assert closed and "version" in str(decode_error(frames[0]))

        # Truncated: half a frame, then the client goes away.
        s = raw(srv.address)
        frame = encode_request(Op.SEND, 1, {"message": {
            "topic": "good", "body": b"never stored", "key": None, "tags": None,
            "properties": {}, "queue_id": -1}})
        s.sendall(frame[:len(frame) // 2])
        s.close()

        # Unknown opcode: an error, but the connection stays usable.
        s = raw(srv.address)
        s.sendall(struct.pack(">IBBHQ", 12, 1, 250, 0, 9) + encode_request(Op.PING, 10, {}))
        dec = FrameDecoder()
        frames = []
        while len(frames) < 2:
            data = s.recv(65536)
            assert data, "the server closed a connection that only sent an unknown opcode"
            frames.extend(dec.feed(data))
        assert frames[0].request_id == 9 and "unknown opcode" in str(decode_error(frames[0]))
        assert frames[1].request_id == 10 and decode_response(frames[1])["protocol_version"] == 1
        s.close()
    finally:
        good.finish()
    assert srv.alive
    assert good.errors == [] and len(good.acked) > 10
    check_stored(srv.address, good.acked)
    with Client(srv.address) as c:
        assert c.call(Op.QUERY_KEY, {"topic": "good", "key": "x", "limit": 1})["messages"] == []
    with Client(srv.address) as c:
        stats = c.call(Op.STATS, {})
    assert '"log_failed": null' in stats["json"]


def test_random_frames_fuzz_never_crash_the_server(start_server):
    srv = start_server(LIMITS)
    rng = random.Random(20261121)
    seeds = [
        encode_request(Op.PING, 1, {}),
        encode_request(Op.PULL, 2, {"topic": "fz", "queue_id": 0, "offset": 0,
                                    "max_messages": 5, "wait_ms": 0}),
        encode_request(Op.QUERY_KEY, 3, {"topic": "fz", "key": "k", "limit": 3}),
        encode_request(Op.COMMIT, 4, {"producer_group": "g", "tx_id": "none"}),
        encode_request(Op.FETCH_OFFSET, 5, {"group": "g", "topic": "fz", "queue_id": 1}),
    ]
    good = Background(srv.address)
    answered = 0
    try:
        for i in range(150):
            kind = i % 3
            if kind == 0:
                data = rng.randbytes(rng.randint(1, 200))
            elif kind == 1:
                data = bytearray(b"".join(rng.sample(seeds, 2)))
                for _ in range(rng.randint(1, 8)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
            else:
                data = rng.choice(seeds)[:rng.randint(1, 20)]
            s = raw(srv.address)
            try:
                s.sendall(bytes(data))
                s.shutdown(socket.SHUT_WR)  # then EOF: a frame left incomplete is truncated
                frames, closed = read_until_eof(s, 5.0)
                assert closed, f"fuzz case {i}: connection neither answered nor closed"
                answered += len(frames)
            except ConnectionError:
                pass  # closed by the server while we were still sending: fine
            finally:
                s.close()
    finally:
        good.finish()
    assert srv.alive
    assert answered > 0
    assert good.errors == [] and len(good.acked) > 10
    with Client(srv.address) as c:
        assert c.ping()["protocol_version"] == 1
    check_stored(srv.address, good.acked)


def test_limits_are_enforced(start_server):
    srv = start_server(LIMITS)
    # max_in_flight = 4: a burst of 20 long polls on one connection; the rest are refused.
    s = raw(srv.address)
    s.sendall(b"".join(encode_request(Op.PULL, i, {"topic": "lim", "queue_id": 0, "offset": 0,
                                                    "max_messages": 1, "wait_ms": 700})
                       for i in range(1, 21)))
    dec = FrameDecoder()
    frames = []
    deadline = time.monotonic() + 10
    while len(frames) < 20 and time.monotonic() < deadline:
        frames.extend(dec.feed(s.recv(65536)))
    s.close()
    busy = [f for f in frames if f.is_error]
    assert len(frames) == 20 and len(busy) == 16
    assert all(isinstance(decode_error(f), ServerBusy) and decode_error(f).retriable
               for f in busy)

    # max_frame_size = 64 KiB: a larger request fails, the client reconnects for the next.
    with Producer(srv.address, retries=0) as p:
        try:
            p.send("lim", b"x" * 70_000)
            raise AssertionError("an oversize frame was accepted")
        except ProtocolError as exc:
            assert "max_frame_size" in str(exc)
        assert p.send("lim", b"small").queue_offset >= 0

    # max_connections = 6: the 7th is refused with ServerBusy and closed.
    socks = [raw(srv.address) for _ in range(6)]
    for i, k in enumerate(socks):
        k.sendall(encode_request(Op.PING, i + 1, {}))
        assert FrameDecoder().feed(k.recv(65536))
    extra = raw(srv.address)
    frames, closed = read_until_eof(extra)
    assert closed and isinstance(decode_error(frames[0]), ServerBusy)
    socks.pop().close()
    time.sleep(0.3)
    with Producer(srv.address, retries=3) as p:
        assert p.send("lim", b"after").queue_offset >= 0
    for k in socks:
        k.close()
    assert srv.alive
    assert fmq.TxState.COMMIT  # the server kept serving throughout
