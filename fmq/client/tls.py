"""TLS for the client side: which CA to trust, the client certificate for mutual TLS, and
the error a failed handshake becomes.

:class:`TLSChannel` runs TLS over a blocking socket for the threaded client, through memory
buffers and locks of its own: one OpenSSL connection must not be used by two threads at once,
and the threaded client has a reader thread and any number of writing threads.

Host names are verified by default (``check_hostname``): the server's certificate must name
the host the client connects to. ``ca_file`` None trusts the system's certificate store.
"""

from __future__ import annotations

import socket
import ssl
import threading
from dataclasses import dataclass

from fmq.errors import InvalidArgument, TLSFailed


@dataclass(frozen=True)
class TLSOptions:
    """How a client speaks TLS to the server (docs/security.md)."""

    #: PEM file of the CA(s) that signed the server's certificate; None = system store.
    ca_file: str | None = None
    #: PEM client certificate (mutual TLS), and its key (None: the key is in cert_file).
    cert_file: str | None = None
    key_file: str | None = None
    #: Whether the server's certificate must name the host connected to.
    check_hostname: bool = True

    def context(self) -> ssl.SSLContext:
        """The client's SSL context; InvalidArgument for a file that cannot be used."""
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file)
            if self.cert_file:
                ctx.load_cert_chain(self.cert_file, self.key_file)
            elif self.key_file:
                raise InvalidArgument("a client key without a client certificate: give "
                                      "--cert too (or drop --cert-key)")
        except (OSError, ssl.SSLError) as exc:
            raise InvalidArgument(
                f"cannot load the TLS files (CA {self.ca_file}, certificate "
                f"{self.cert_file}, key {self.key_file}): {exc}; check the paths and that "
                f"they are PEM files") from None
        ctx.check_hostname = self.check_hostname
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        return ctx


TLSSetting = TLSOptions | ssl.SSLContext | bool | None


def client_context(tls: TLSSetting) -> ssl.SSLContext | None:
    """An SSL context from what a client was given: None or False (plaintext), True (TLS
    with the system's CAs), :class:`TLSOptions`, or a ready context."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return TLSOptions().context()
    if isinstance(tls, TLSOptions):
        return tls.context()
    if isinstance(tls, ssl.SSLContext):
        return tls
    raise InvalidArgument(f"tls must be a TLSOptions, an ssl.SSLContext, True or None, "
                          f"not {type(tls).__name__}")


def handshake_failed(address: tuple[str, int], exc: BaseException) -> TLSFailed:
    """The error a failed TLS handshake with ``address`` becomes, with what to check."""
    text = str(exc)
    if isinstance(exc, ssl.SSLCertVerificationError):
        hint = ("the server's certificate is not signed by a CA this client trusts, or it "
                "does not name this host; give the CA that signed it with --ca-file "
                "(TLSOptions.ca_file) and connect by a name the certificate carries")
    elif "WRONG_VERSION_NUMBER" in text.upper() or "record layer failure" in text:
        hint = "the server does not speak TLS on this port; connect without --tls"
    elif "CERTIFICATE_REQUIRED" in text.upper() or "certificate required" in text:
        hint = ("the server requires a client certificate (mutual TLS); give --cert and "
                "--cert-key (TLSOptions.cert_file, key_file)")
    else:
        hint = "check the server's TLS set-up and the client's --ca-file, --cert and --cert-key"
    return TLSFailed(f"TLS handshake with {address[0]}:{address[1]} failed ({text}): {hint}")


def plaintext_refused(address: tuple[str, int]) -> TLSFailed:
    """A plaintext connection closed before any answer: the usual cause is a TLS port."""
    return TLSFailed(
        f"the server at {address[0]}:{address[1]} closed the connection without answering; "
        f"it probably requires TLS: connect with --tls (tls=TLSOptions(...)) and "
        f"--ca-file")


class TLSChannel:
    """TLS over a connected blocking socket, for one reading thread and any number of
    writing threads (``sendall`` and ``recv`` as a socket has them)."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, address: tuple[str, int]
                 ) -> None:
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=False,
                                     server_hostname=address[0])
        #: Guards the TLS object; never held across socket I/O.
        self._lock = threading.Lock()
        #: Held while encrypted bytes are taken from ``_outgoing`` and sent, so they leave
        #: in the order they were made.
        self._send_lock = threading.Lock()
        self._handshake(address)

    def _handshake(self, address: tuple[str, int]) -> None:
        """Complete the handshake (the socket's time-out bounds each step)."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                data = self._sock.recv(1 << 16)
                if not data:
                    raise handshake_failed(address, ConnectionError(
                        "the server closed the connection during the handshake")) from None
                self._incoming.write(data)
            except ssl.SSLError as exc:
                self._flush_quietly()
                raise handshake_failed(address, exc) from None
        self._flush()

    def _flush(self) -> None:
        with self._send_lock:
            with self._lock:
                data = self._outgoing.read()
            if data:
                self._sock.sendall(data)

    def _flush_quietly(self) -> None:
        try:  # the alert that tells the server why
            self._flush()
        except OSError:
            pass

    def sendall(self, data: bytes) -> None:
        with self._send_lock:
            with self._lock:
                self._tls.write(data)
                encrypted = self._outgoing.read()
            self._sock.sendall(encrypted)

    def recv(self, size: int) -> bytes:
        """Plaintext bytes from the server; b"" once it closed."""
        while True:
            data = self._sock.recv(size)
            if not data:
                return b""
            chunks = []
            with self._lock:
                self._incoming.write(data)
                try:
                    while True:
                        chunk = self._tls.read(size)
                        chunks.append(chunk)
                        if not chunk:  # the server's close_notify
                            break
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:  # the same, as some versions report it
                    chunks.append(b"")
                reply = self._outgoing.pending
            if reply:  # post-handshake messages that need an answer
                self._flush()
            plain = b"".join(chunks)
            if plain or (chunks and not chunks[-1]):
                return plain
