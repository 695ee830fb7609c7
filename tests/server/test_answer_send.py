"""``send_answers``, the compiled one (``fmq.server.net._answer_send_c``) and its pure twin
(``fmq.server.net.answer_send``), on real connected sockets: what each socket took is what
its peer reads, a full socket takes part or none (never blocks), a reset or closed peer
takes none (no SIGPIPE, no exception: the transport meets the error itself), and the pure
twin takes nothing (every answer whole through the transport), so the pure path uses no
sender at all. Which connections are given to it (``socket_fd``): plain TCP transports of
asyncio and uvloop, never a TLS one."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import struct
import subprocess
import sys
import time

import pytest
import trustme

from fmq.server.net import answer_send
from fmq.server.net.answer_writes import socket_fd
from tests.native.twins import compiled

try:
    import uvloop
except ImportError:  # the standard loop only
    uvloop = None


@pytest.fixture(scope="module")
def c_send():
    return compiled("fmq.server.net._answer_send_c").send_answers


def _pair(rcvbuf: int | None = None) -> tuple[socket.socket, socket.socket]:
    """A connected TCP pair on 127.0.0.1: (sending side, non-blocking; receiving side)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        peer = socket.socket()
        if rcvbuf is not None:
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        peer.connect(listener.getsockname())
        mine, _ = listener.accept()
    mine.setblocking(False)
    if rcvbuf is not None:
        mine.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, rcvbuf)
    return mine, peer


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    sock.settimeout(30)
    got = bytearray()
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        assert chunk, f"closed after {len(got)} of {n} bytes"
        got += chunk
    return bytes(got)


def test_every_answer_goes_to_its_own_socket(c_send) -> None:
    pairs = [_pair() for _ in range(5)]
    try:
        answers = [bytes([i]) * (100 + 37 * i) for i in range(5)]
        answers.append(bytearray(b"held in a bytearray"))
        answers.append(memoryview(b"..a view of bytes..")[2:-2])
        fds = [mine.fileno() for mine, _ in pairs] + [pairs[0][0].fileno()] * 2
        sent = c_send(fds, answers)
        assert sent == [len(a) for a in answers]
        for i, (_, peer) in enumerate(pairs):
            want = bytes(answers[i]) + (bytes(answers[5]) + bytes(answers[6]) if i == 0 else b"")
            assert _read_exactly(peer, len(want)) == want
    finally:
        for mine, peer in pairs:
            mine.close()
            peer.close()


def test_a_full_socket_takes_part_or_none_and_never_blocks(c_send) -> None:
    mine, peer = _pair(rcvbuf=4096)
    try:
        answer = bytes(range(256)) * 4096  # 1 MiB: far more than both buffers hold
        started, sent, takes = time.monotonic(), 0, []
        for _ in range(1000):  # until the socket is full: a send that takes nothing
            takes.append(c_send([mine.fileno()], [answer[sent:]])[0])
            sent += takes[-1]
            if takes[-1] == 0:
                break
        assert takes[-1] == 0, "the socket never filled"
        assert takes[0] > 0 and sent < len(answer)  # the first took part of it
        assert time.monotonic() - started < 5
        assert _read_exactly(peer, sent) == answer[:sent]
    finally:
        mine.close()
        peer.close()


def test_a_reset_peer_takes_nothing_and_raises_nothing(c_send) -> None:
    mine, peer = _pair()
    other, other_peer = _pair()
    try:
        # SO_LINGER 0: the close sends a reset.
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()
        deadline = time.monotonic() + 10
        results, tries = [], 0
        while time.monotonic() < deadline:  # the reset is seen on loopback at once, or soon
            results = c_send([mine.fileno(), other.fileno()], [b"lost", b"kept"])
            tries += 1
            if results[0] == 0:
                break
            time.sleep(0.01)
        assert results == [0, 4]
        assert c_send([mine.fileno()], [b"again"]) == [0]  # EPIPE now: no SIGPIPE either
        assert _read_exactly(other_peer, 4 * tries) == b"kept" * tries
    finally:
        for s in (mine, other, other_peer):
            s.close()


def test_bad_arguments_are_refused_before_anything_is_sent(c_send) -> None:
    mine, peer = _pair()
    try:
        with pytest.raises(ValueError, match="2 sockets for 1 answers"):
            c_send([mine.fileno(), mine.fileno()], [b"x"])
        with pytest.raises(TypeError):
            c_send([mine.fileno(), mine.fileno()], [b"first", "not bytes"])
        assert c_send([], []) == []
        assert c_send([mine.fileno()], [b"only this"]) == [9]
        assert _read_exactly(peer, 9) == b"only this"
        with pytest.raises(ValueError, match="2 sockets for 1 answers"):
            answer_send.send_answers([1, 2], [b"x"])
    finally:
        mine.close()
        peer.close()


def test_the_pure_twin_sends_nothing_itself() -> None:
    mine, peer = _pair()
    try:
        assert answer_send.send_answers([mine.fileno()] * 2, [b"a", b"bc"]) == [0, 0]
        peer.settimeout(0.2)
        with pytest.raises(TimeoutError):
            peer.recv(10)
    finally:
        mine.close()
        peer.close()


def _sender_chosen(**env: str) -> str:
    """The module of ``answer_writes.SEND_ANSWERS`` in a fresh process run with ``env``
    (FMQ's path variables otherwise unset), or ``None``."""
    code = ("from fmq.server.net import answer_writes as w; s = w.SEND_ANSWERS; "
            "print(s if s is None else s.__module__)")
    environ = {k: v for k, v in os.environ.items()
               if k not in ("FMQ_NO_EXTENSIONS", "FMQ_REQUIRE_EXTENSIONS")}
    done = subprocess.run([sys.executable, "-c", code], env={**environ, **env},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_pure_path_has_no_direct_sender(c_send) -> None:
    """``FMQ_NO_EXTENSIONS=1``: no sender (each connection's answers go through its
    transport, none gathered for a twin that would take nothing); else the compiled one."""
    assert _sender_chosen(FMQ_NO_EXTENSIONS="1") == "None"
    assert _sender_chosen() == "fmq.server.net._answer_send_c"


# ---------------------------------------------------------------- which transports take part


def _tls_contexts(tmp_path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


LOOPS = ["asyncio"] + (["uvloop"] if uvloop is not None else [])


def _run(loop_name: str, main) -> object:
    if loop_name == "uvloop":
        return uvloop.run(main)
    return asyncio.run(main)


async def _server_transport_fd(server_ssl: ssl.SSLContext | None,
                               client_ssl: ssl.SSLContext | None) -> tuple[int, int]:
    """``socket_fd`` of a server connection's transport, and its socket's real fd."""
    made: asyncio.Future = asyncio.get_running_loop().create_future()

    class Session(asyncio.Protocol):
        def connection_made(self, transport) -> None:
            made.set_result((socket_fd(transport),
                             transport.get_extra_info("socket").fileno()))

    server = await asyncio.get_running_loop().create_server(
        Session, "127.0.0.1", 0, ssl=server_ssl)
    try:
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ssl,
            server_hostname="127.0.0.1" if client_ssl else None)
        try:
            return await asyncio.wait_for(made, 30)
        finally:
            writer.close()
    finally:
        server.close()


@pytest.mark.parametrize("loop_name", LOOPS)
def test_a_plain_tcp_transport_is_written_directly_a_tls_one_never(loop_name, tmp_path) -> None:
    fd, real = _run(loop_name, _server_transport_fd(None, None))
    assert fd == real and fd >= 0
    server_ssl, client_ssl = _tls_contexts(tmp_path)
    fd, real = _run(loop_name, _server_transport_fd(server_ssl, client_ssl))
    assert fd == -1 and real >= 0  # the socket is there, but it carries TLS records
