"""TLS on the client port: real certificates (trustme), a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from fmq.client import Client, Consumer, Producer, TLSOptions
from fmq.client.aio import AsyncProducer
from fmq.errors import TLSFailed
from fmq.protocol import FrameDecoder, Op, decode_error, encode_request
from tests.server.harness import run_cli

pytestmark = pytest.mark.timeout(120)


def trusted(certs, **extra) -> dict:
    return {"tls": TLSOptions(ca_file=certs.ca, **extra)}


def test_a_tls_client_sends_and_consumes(certs, secure_server):
    srv = secure_server(certs.server_config(), trusted(certs))
    with Producer(srv.address, **trusted(certs)) as producer:
        results = [producer.send("t", f"m{i}".encode()) for i in range(20)]
    assert len({(r.queue_id, r.queue_offset) for r in results}) == 20
    got = []
    with Consumer(srv.address, "g", "t", start="earliest", **trusted(certs)) as consumer:
        deadline = time.monotonic() + 20
        while len(got) < 20 and time.monotonic() < deadline:
            got += consumer.poll(0.5)
    assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(20))
    assert "(TLS," in srv.log()


def test_the_asyncio_producer_speaks_tls(certs, secure_server):
    srv = secure_server(certs.server_config(), trusted(certs))

    async def run() -> list:
        async with AsyncProducer(srv.address, **trusted(certs)) as producer:
            futures = [await producer.send_async("a", b"x") for _ in range(50)]
            return await asyncio.gather(*futures)

    assert len(asyncio.run(run())) == 50


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_client_trusting_another_ca_is_refused(certs, secure_server, kind):
    srv = secure_server(certs.server_config(), trusted(certs))
    other = {"tls": TLSOptions(ca_file=certs.other_ca)}
    with pytest.raises(TLSFailed, match="not signed by a CA this client trusts"):
        if kind == "sync":
            with Client(srv.address, **other) as client:
                client.ping()
        else:
            async def run() -> None:
                async with AsyncProducer(srv.address, **other) as producer:
                    await producer.send("a", b"x")
            asyncio.run(run())
    assert srv.alive


def test_the_host_name_is_checked(certs, secure_server):
    """A certificate for "localhost" does not do for 127.0.0.1, unless asked not to check."""
    srv = secure_server(certs.server_config(cert=certs.localhost_only),
                        {"tls": TLSOptions(ca_file=certs.ca, check_hostname=False)})
    with pytest.raises(TLSFailed, match="does not name this host"), \
            Client(srv.address, **trusted(certs)) as client:
        client.ping()
    with Client(f"localhost:{srv.port}", **trusted(certs)) as client:
        assert client.ping()["protocol_version"] == 1


def test_a_plaintext_client_on_a_tls_port_gets_a_clear_error_at_once(certs, secure_server):
    srv = secure_server(certs.server_config(), trusted(certs))
    started = time.monotonic()
    with pytest.raises(TLSFailed, match="requires TLS"), \
            Client(srv.address, request_timeout=30, retries=3) as client:
        client.ping()
    # Not retried, not waited for: the error is the server's answer (a bound, not a speed
    # target: a hang would take request_timeout x retries).
    assert time.monotonic() - started < 20
    # The raw bytes: one plaintext FMQ error frame, then the server closes.
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(encode_request(Op.PING, 1, {}))
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    (frame,) = FrameDecoder(1 << 20).feed(data)
    assert isinstance(decode_error(frame), TLSFailed)


def test_a_tls_client_on_a_plaintext_port_gets_a_clear_error(tmp_path, certs, start_server):
    srv = start_server()
    with pytest.raises(TLSFailed, match="does not speak TLS"), \
            Client(srv.address, **trusted(certs)) as client:
        client.ping()


def test_mutual_tls_requires_a_client_certificate(certs, secure_server):
    with_cert = trusted(certs, cert_file=certs.client_cert)
    srv = secure_server(certs.server_config(mutual=True), with_cert)
    with Producer(srv.address, **with_cert) as producer:
        assert producer.send("m", b"x").queue_offset == 0
    with pytest.raises(TLSFailed), Client(srv.address, **trusted(certs)) as client:
        client.ping()
    assert srv.alive


def test_silent_and_half_open_connections_do_not_block_tls_clients(certs, secure_server):
    config = certs.server_config()
    config["server"]["handshake_timeout_ms"] = 500
    srv = secure_server(config, trusted(certs))
    silent = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(5)]
    try:
        with Client(srv.address, **trusted(certs)) as client:
            assert client.ping()["protocol_version"] == 1
        for sock in silent:  # closed by the server after handshake_timeout_ms
            sock.settimeout(10)
            assert sock.recv(10) == b""
    finally:
        for sock in silent:
            sock.close()


def test_the_cli_connects_with_tls(certs, secure_server):
    srv = secure_server(certs.server_config(), trusted(certs))
    out = run_cli("produce", "--server", srv.address, "--tls", "--ca-file", certs.ca,
                  "--topic", "c", "--body", "hello", "--json")
    assert out.returncode == 0, out.stderr
    out = run_cli("consume", "--server", srv.address, "--ca-file", certs.ca, "--topic", "c",
                  "--from-beginning", "--max", "1", "--json")
    assert out.returncode == 0 and '"body": "hello"' in out.stdout, out.stderr
    for args in (("stats",), ("topics",), ("tx", "list"), ("groups",)):
        out = run_cli(*args, "--server", srv.address, "--tls", "--ca-file", certs.ca)
        assert out.returncode == 0, (args, out.stderr)
    plain = run_cli("stats", "--server", srv.address)
    assert plain.returncode == 1
    assert "requires TLS" in plain.stderr and "Traceback" not in plain.stderr


def body(n: int, i: int) -> bytes:
    """Mostly small, every 7th about 5 KiB: batches span several TLS records."""
    return f"{n}-{i}.".encode() * (1 + 997 * (i % 7 == 0))


def test_many_threads_share_one_tls_connection(certs, secure_server):
    """The threaded client's TLS channel: writers in 8 threads and the reader thread on one
    connection, requests pipelined; every answer arrives and matches its request."""
    srv = secure_server(certs.server_config(), trusted(certs))
    errors: list[BaseException] = []

    with Producer(srv.address, **trusted(certs)) as producer:
        def work(n: int) -> None:
            try:
                futures = [producer.send_async("shared", body(n, i))
                           for i in range(200)]
                producer.flush()
                assert len({f.result(60).offset for f in futures}) == 200
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not errors, errors[:3]
    with Consumer(srv.address, "g2", "shared", start="earliest", **trusted(certs)) as consumer:
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 1600 and time.monotonic() < deadline:
            got += consumer.poll(0.5)
    assert sorted(m.body for m in got) == sorted(body(n, i) for n in range(8)
                                                 for i in range(200))
