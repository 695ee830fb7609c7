"""TLS on the client port: the server's SSL context, and the accept loop that tells a TLS
client from a plaintext one.

A TLS connection starts with a handshake record (first byte 0x16); an FMQ frame starts
with its length, which would have to be over 350 MiB to begin with that byte. The acceptor
peeks at the first byte of every new connection: TLS goes on to the handshake, anything else
gets one plaintext FMQ error frame saying the port requires TLS and is closed, so a client
that forgot ``--tls`` gets a clear answer instead of a silent close. Without TLS configured
the server does not use this module at all (the plaintext accept path is unchanged).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable

from fmq.errors import ConfigError, TLSFailed
from fmq.protocol import encode_error
from fmq.server.config import ServerConfig

logger = logging.getLogger("fmq.server")

TLS_HANDSHAKE_RECORD = 0x16


def server_context(config: ServerConfig) -> ssl.SSLContext | None:
    """The SSL context of the client port, or None when TLS is not configured."""
    if not config.tls_cert_file:
        if config.tls_key_file or config.tls_client_ca_file:
            raise ConfigError("tls_key_file and tls_client_ca_file need tls_cert_file: give "
                              "the server certificate with --tls-cert")
        return None
    try:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(config.tls_cert_file, config.tls_key_file or None)
        if config.tls_client_ca_file:
            # Mutual TLS: a client must show a certificate signed by this CA.
            ctx.load_verify_locations(config.tls_client_ca_file)
            # A certificate that is shown must verify; a missing one is refused by the
            # session (require_client_certificate) with an error the client can read, where
            # CERT_REQUIRED would end a TLS 1.3 handshake in a silent close.
            ctx.verify_mode = ssl.CERT_OPTIONAL
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot load the server's TLS files (certificate {config.tls_cert_file}, key "
            f"{config.tls_key_file}, client CA {config.tls_client_ca_file}): {exc}; check the "
            f"paths and that they are PEM files (docs/security.md)") from None
    return ctx


class TLSAcceptor:
    """Accepts connections on ``listener`` and hands TLS ones to ``protocol_factory``."""

    def __init__(self, listener: socket.socket, context: ssl.SSLContext,
                 protocol_factory: Callable[[], asyncio.Protocol], handshake_timeout: float,
                 max_sniffing: int) -> None:
        self.listener = listener
        self.context = context
        self.protocol_factory = protocol_factory
        self.handshake_timeout = handshake_timeout
        self.max_sniffing = max_sniffing
        self._sniffing: set[asyncio.Task] = set()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self.listener.listen(1024)
        self.listener.setblocking(False)
        self._task = asyncio.ensure_future(self._accept_loop())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for task in list(self._sniffing):
            task.cancel()
        self.listener.close()

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _addr = await loop.sock_accept(self.listener)
            except OSError as exc:  # out of descriptors, or the peer left already
                logger.warning("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            if len(self._sniffing) >= self.max_sniffing:
                conn.close()  # half-open connections must not pile up
                continue
            task = asyncio.ensure_future(self._serve(conn))
            self._sniffing.add(task)
            task.add_done_callback(self._sniffing.discard)

    async def _serve(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        try:
            first = await asyncio.wait_for(_peek(loop, conn), self.handshake_timeout)
            if first != TLS_HANDSHAKE_RECORD:
                if first is not None:
                    await asyncio.wait_for(_refuse_plaintext(loop, conn), self.handshake_timeout)
                conn.close()
                return
            await loop.connect_accepted_socket(
                tls_sessions(self.protocol_factory, self.context.verify_mode != ssl.CERT_NONE),
                conn, ssl=self.context,
                ssl_handshake_timeout=self.handshake_timeout)
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
            logger.info("TLS connection refused: %s", exc)
            conn.close()
        except asyncio.CancelledError:
            conn.close()
            raise


def tls_sessions(factory: Callable[[], asyncio.Protocol], require_certificate: bool
                 ) -> Callable[[], asyncio.Protocol]:
    """``factory``, adapted to TLS: a session never asks to stay half-open (TLS cannot),
    and with ``require_certificate`` a peer that showed no certificate gets an error frame
    (over TLS) and is closed before any request runs."""
    def make() -> asyncio.Protocol:
        session = factory()
        opened, eof = session.connection_made, session.eof_received

        def connection_made(transport: asyncio.BaseTransport) -> None:
            opened(transport)
            if require_certificate and not transport.get_extra_info("peercert"):
                session.fail(0, 0, TLSFailed(
                    "this server requires a client certificate (mutual TLS): give --cert and "
                    "--cert-key (TLSOptions.cert_file, key_file); see docs/security.md"),
                    "no client certificate")

        def eof_received() -> bool:
            eof()
            return False  # TLS closes the transport at EOF whatever this says

        session.connection_made = connection_made
        session.eof_received = eof_received
        return session
    return make


async def _peek(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> int | None:
    """The first byte the peer sent, without taking it (None: it closed first)."""
    ready = loop.create_future()
    fd = conn.fileno()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_reader(fd)
    data = conn.recv(1, socket.MSG_PEEK)
    return data[0] if data else None


async def _refuse_plaintext(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    """Answer a plaintext client with one error frame and close after it read it (closing
    with its request unread would reset the connection, and the answer could be lost)."""
    await loop.sock_sendall(conn, encode_error(0, 0, TLSFailed(
        "this port requires TLS: connect with --tls and --ca-file (tls=TLSOptions(...) in "
        "the Python client); see docs/security.md")))
    conn.shutdown(socket.SHUT_WR)
    while await loop.sock_recv(conn, 1 << 16):  # until the client closes
        pass
