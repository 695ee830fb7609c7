"""A client pointed at a port where another kind of server listens says so: at once when
the peer answers with bytes that are no FMQ answer, and after ``connect_timeout`` (not
after every retry of a full request time-out) when it stays silent, as an HTTP server
waiting for a request line does. Real listeners on 127.0.0.1."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading

import pytest

from fmq.client import Client
from fmq.client.aio import AsyncProducer
from fmq.errors import ConnectionLost, NotAnFMQServer


@pytest.fixture
def talking_peer():
    """Answers anything it receives with an HTTP error, as many servers do."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(1024)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(5)
    listener.close()


@pytest.fixture
def silent_http_server():
    """The standard library's HTTP server: it waits for a request line that never comes."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             http.server.SimpleHTTPRequestHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_a_peer_answering_other_bytes_is_named_at_once(talking_peer):
    with Client(talking_peer, retries=3, request_timeout=30) as client:
        with pytest.raises(NotAnFMQServer) as caught:
            client.ping()
    assert f"{talking_peer} does not speak the FMQ protocol" in str(caught.value)
    assert "HTTP/1.1 400" in str(caught.value)
    assert not caught.value.retriable


def test_the_asyncio_client_names_it_too(talking_peer):
    async def send() -> None:
        async with AsyncProducer(talking_peer, request_timeout=30) as producer:
            await producer.send("t", b"x")

    with pytest.raises(NotAnFMQServer, match="does not speak the FMQ protocol"):
        asyncio.run(send())


def test_a_silent_peer_fails_the_handshake_within_the_connect_timeout(silent_http_server):
    with Client(silent_http_server, retries=0, request_timeout=30,
                connect_timeout=0.5) as client:
        with pytest.raises(ConnectionLost) as caught:
            client.ping()
    assert "did not answer the FMQ handshake within 0.5s" in str(caught.value)
    assert silent_http_server in str(caught.value)
