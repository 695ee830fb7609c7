"""One TCP connection to an FMQ server: framing and request-id matching, nothing else.

Any number of threads may call :meth:`Connection.submit` at once: each request gets a fresh
request id and a :class:`concurrent.futures.Future`; a reader thread parses response frames
and completes the future with the same id (pipelining: answers may come back in any order).
When the socket breaks, every pending future fails with :class:`ConnectionLost`.

A request may also be *held* (:meth:`Connection.hold_encoded`): its frame goes out in the
same write as the next request on the connection, or alone after a short linger
(:mod:`fmq.client.held_frames`); a transactional producer's COMMIT rides with the next
PREPARE so (docs/transactions.md, *A commit written with the next prepare*).
"""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from fmq.errors import (
    ConnectionLost,
    FMQError,
    InvalidArgument,
    NotAnFMQServer,
    NotPrimary,
    NotSent,
    ProtocolError,
    RequestTimeout,
)
from fmq.protocol import (
    DEFAULT_MAX_FRAME,
    PROTOCOL_VERSION,
    Frame,
    FrameDecoder,
    Op,
    decode_error,
    decode_response,
    encode_request,
)

from .held_frames import HeldFrames
from .tls import TLSChannel, handshake_failed

logger = logging.getLogger("fmq.client")

DEFAULT_PORT = 9876
SLOT_WAIT_S = 60.0
#: Largest answer accepted. The server keeps pull answers near 8 MiB, but one message may be
#: as large as the broker's max_message_size; this only guards against a rogue peer.
CLIENT_MAX_FRAME = 4 * DEFAULT_MAX_FRAME


def parse_servers(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"host:port"``, ``"h1:p1,h2:p2"`` or a list of such strings → addresses."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, str(DEFAULT_PORT)
        try:
            out.append((host.strip("[]") or "127.0.0.1", int(port)))
        except ValueError:
            raise InvalidArgument(f"bad server address {item!r}: use HOST:PORT") from None
    if not out:
        raise InvalidArgument("no server address given: use HOST:PORT (e.g. 127.0.0.1:9876)")
    return out


def cannot_connect(address: tuple[str, int], cause: BaseException) -> ConnectionLost:
    return ConnectionLost(
        f"cannot connect to FMQ server {address[0]}:{address[1]} ({cause or 'time-out'}); "
        f"check that `fmq server` runs there and the address is right")


def lost_error(address: tuple[str, int], cause: BaseException | None) -> FMQError:
    """What a request fails with when its connection broke because of ``cause``."""
    if isinstance(cause, FMQError) and not isinstance(cause, ConnectionLost):
        return cause  # a connection-level error the server sent (request id 0)
    if isinstance(cause, ssl.SSLError):  # e.g. TLS 1.3 refuses a client certificate late
        return handshake_failed(address, cause)
    return ConnectionLost(
        f"connection to {address[0]}:{address[1]} lost ({cause}); the request may or may "
        f"not have been applied")


def not_sent_error(address: tuple[str, int], cause: BaseException | None) -> FMQError:
    """What a request fails with when its connection had broken before it was written:
    nothing of it was applied (a caller may send it elsewhere)."""
    err = lost_error(address, cause)
    if type(err) is not ConnectionLost:
        return err
    return NotSent(f"connection to {address[0]}:{address[1]} lost ({cause}) before the "
                   f"request was sent; nothing of it was applied")


def timed_out_error(op: Op, address: tuple[str, int], timeout: float) -> RequestTimeout:
    """What a request fails with when no answer came within ``timeout`` seconds."""
    return RequestTimeout(
        f"no answer to {op.name} from {address[0]}:{address[1]} within {timeout:.1f}s; the "
        f"request may or may not have been applied")


def no_handshake(address: tuple[str, int], timeout: float) -> ConnectionLost:
    """What a connection fails with when the peer did not answer HELLO, the first request
    (an FMQ server answers it at once; other servers, HTTP among them, wait silently)."""
    return ConnectionLost(
        f"{address[0]}:{address[1]} did not answer the FMQ handshake within {timeout:.1f}s: "
        f"is an FMQ server listening there? Check the address and port (a busy FMQ server: "
        f"raise connect_timeout)")


def closed_before_handshake(address: tuple[str, int]) -> ConnectionLost:
    """What a connection fails with when the peer closed it before answering HELLO, the
    first request: an FMQ server answers it (or sends an error first); a peer that hangs
    up at once is most likely another kind of server, or an FMQ server going down.
    Retriable, as a fail-over's stopping server does the same."""
    return ConnectionLost(
        f"{address[0]}:{address[1]} closed the connection before answering the FMQ "
        f"handshake: it is not an FMQ server, or one that was shutting down; check the "
        f"address and port")


class PeerCheck:
    """Recognises a peer that is not an FMQ server from the first bytes it sends: they must
    start an FMQ answer frame (a sane length, this protocol's version, the response flag).
    Fed what the connection reads until the first frame has been parsed."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.checked = False
        self._first = b""

    def feed(self, decoder: FrameDecoder, data: bytes) -> list[Frame]:
        """``decoder.feed(data)``, raising NotAnFMQServer where FMQ would not answer so."""
        if self.checked:
            return decoder.feed(data)
        self._first = (self._first + data)[:32]
        try:
            frames = decoder.feed(data)
        except ProtocolError as exc:
            raise self._wrong(exc) from None
        if frames:
            first = frames[0]
            if first.version != PROTOCOL_VERSION or not first.is_response:
                raise self._wrong(None)
            self.checked = True
        return frames

    def _wrong(self, cause: ProtocolError | None) -> NotAnFMQServer:
        why = f"; {cause}" if cause is not None else ""
        return NotAnFMQServer(
            f"{self.address[0]}:{self.address[1]} does not speak the FMQ protocol (its first "
            f"bytes were {self._first!r}{why}); check the address and port")


def outcome_of(frame: Frame, decode: Callable[[Frame], Any]) -> Any:
    """The answer a response frame carries: the decoded value, or the exception to raise
    (the server's error, or ProtocolError for an answer that cannot be read)."""
    try:
        return decode_error(frame) if frame.is_error else decode(frame)
    except ProtocolError as exc:
        return exc


class Connection:
    def __init__(self, address: tuple[str, int], connect_timeout: float = 5.0,
                 max_frame: int = CLIENT_MAX_FRAME, max_in_flight: int = 128,
                 tls: ssl.SSLContext | None = None) -> None:
        self.address = address
        try:
            sock = socket.create_connection(address, timeout=connect_timeout)
        except OSError as exc:
            raise cannot_connect(address, exc) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            #: What frames are written to and read from: the socket, or TLS over it.
            self._io: socket.socket | TLSChannel = (
                sock if tls is None else TLSChannel(sock, tls, address))
        except OSError as exc:
            sock.close()
            raise cannot_connect(address, exc) from None
        except BaseException:
            sock.close()
            raise
        sock.settimeout(None)
        self._sock = sock
        self._decoder = FrameDecoder(max_frame)
        self._peer_check = PeerCheck(address)
        #: request id -> (opcode, future, decoder of a successful answer)
        self._pending: dict[int, tuple[int, Future, Callable[[Frame], Any]]] = {}
        self._lock = threading.Lock()  # guards _pending, _closed and _held
        self._send_lock = threading.Lock()  # one write at a time on the socket
        #: Frames held for the next write (hold_encoded), and the thread that writes them
        #: alone when nothing follows in time (started on the first hold).
        self._held = HeldFrames()
        self._held_cond = threading.Condition(self._lock)
        self._flusher: threading.Thread | None = None
        self._flusher_wakes_at = float("inf")  # the due time the flusher waits for
        self._ids = itertools.count(1)  # id 0 is reserved for connection-level errors
        self._closed: BaseException | None = None
        #: The primary a NotPrimary answer on this connection named ("" when the follower
        #: knew none): the client moves to it before its next request.
        self.redirect: str | None = None
        # Stay below the server's max_in_flight (256 by default) however many threads share
        # this connection: a thread waits for a slot instead of getting ServerBusy.
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name=f"fmq-conn-{address[0]}:{address[1]}")
        self._reader.start()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def submit(self, op: Op, fields: dict[str, Any]) -> Future:
        """Send a request; the future resolves to the response fields or raises the
        server's error (the same FMQError class the embedded API raises)."""
        return self.submit_encoded(op, lambda rid: encode_request(op, rid, fields),
                                   decode_response)

    def submit_encoded(self, op: Op, build: Callable[[int], bytes],
                       decode: Callable[[Frame], Any]) -> Future:
        """Send the frame ``build(request_id)`` returns; the future resolves to
        ``decode(answer frame)`` or raises the server's error.

        Raises (ConnectionLost) only when nothing of the request was written; once it
        returns, a failure to write fails the future instead."""
        rid = next(self._ids)
        data = build(rid)  # bad fields fail here, before taking a slot
        fut = self._register(op, rid, decode)
        try:
            with self._send_lock:
                # Read without the lock: a frame held while this runs was held after this
                # request was submitted, and the next write takes it.
                if self._held:
                    with self._lock:
                        data = b"".join([*self._held.take(), data])
                self._io.sendall(data)
        except OSError as exc:
            self._shutdown(exc)
        return fut

    def hold_encoded(self, op: Op, build: Callable[[int], bytes],
                     decode: Callable[[Frame], Any], linger_s: float) -> Future:
        """:meth:`submit_encoded`, except that the frame is not written now: it goes out in
        the same write as the next request submitted on this connection (after the frames
        held before it), or alone once ``linger_s`` seconds passed with none, or when
        :meth:`flush_held` is called. Its future fails with :class:`NotSent` when the
        connection breaks before it was written (nothing of it was applied).

        Raises (ConnectionLost) when the connection is already closed."""
        rid = next(self._ids)
        data = build(rid)
        fut = self._slot_future()
        with self._lock:
            self._register_locked(op, rid, decode, fut)
            self._held.add(rid, data, linger_s)
            if self._held.due < self._flusher_wakes_at:
                self._held_cond.notify()
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_when_due, daemon=True,
                    name=f"fmq-held-{self.address[0]}:{self.address[1]}")
                self._flusher.start()
        return fut

    def flush_held(self) -> None:
        """Write the held frames now, alone (someone waits for an answer of theirs)."""
        if not self._held:
            return
        try:
            with self._send_lock:
                with self._lock:
                    frames = self._held.take()
                if frames:
                    self._io.sendall(b"".join(frames))
        except OSError as exc:
            self._shutdown(exc)

    def _slot_future(self) -> Future:
        """A future for one request's answer, holding one of the in-flight slots until it
        is done."""
        if not self._slots.acquire(timeout=SLOT_WAIT_S):
            raise RequestTimeout(
                f"{SLOT_WAIT_S:.0f}s waiting for one of the requests in flight on this "
                f"connection to finish; the server is overloaded or unreachable")
        fut: Future = Future()
        fut.add_done_callback(lambda _f: self._slots.release())
        return fut

    def _register(self, op: Op, rid: int, decode: Callable[[Frame], Any]) -> Future:
        """A future for the answer to request ``rid``, holding one of the in-flight slots.
        Raises (NotSent) when the connection is closed."""
        fut = self._slot_future()
        with self._lock:
            self._register_locked(op, rid, decode, fut)
        return fut

    def _register_locked(self, op: Op, rid: int, decode: Callable[[Frame], Any],
                         fut: Future) -> None:
        """``fut`` awaits the answer to request ``rid`` (the caller holds ``_lock``).
        Raises (NotSent), failing ``fut`` and so releasing its slot, when the connection
        is closed."""
        if self._closed is not None:
            unsent = not_sent_error(self.address, self._closed)
            fut.set_exception(unsent)  # releases the slot
            raise unsent
        self._pending[rid] = (op, fut, decode)

    def _flush_when_due(self) -> None:
        """The flusher thread: writes held frames alone once the oldest is due. It wakes
        when a frame is held due earlier than it waits for, so a producer whose held
        frames ride with its next requests wakes it about once per linger, not per frame."""
        while True:
            with self._held_cond:
                while True:
                    if self._closed is not None:
                        return
                    rest = self._held.due - time.monotonic()
                    if rest <= 0:
                        break
                    self._flusher_wakes_at = self._held.due
                    self._held_cond.wait(None if rest == float("inf") else rest)
                self._flusher_wakes_at = float("inf")
            self.flush_held()

    def request(self, op: Op, fields: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        fut = self.submit(op, fields)
        try:
            return fut.result(timeout)
        except FutureTimeout:
            err = timed_out_error(op, self.address, timeout)
            self.forget(fut, err)
            raise err from None

    def forget(self, fut: Future, error: BaseException) -> None:
        """Stop waiting for ``fut`` (a late answer is dropped) and fail it with ``error``."""
        with self._lock:
            for rid, (_op, f, _decode) in list(self._pending.items()):
                if f is fut:
                    del self._pending[rid]
        if not fut.done():
            try:
                fut.set_exception(error)
            except InvalidStateError:
                pass  # the answer arrived meanwhile

    def _lost(self) -> FMQError:
        return lost_error(self.address, self._closed)

    def _read_loop(self) -> None:
        io = self._io
        try:
            while True:
                data = io.recv(1 << 18)
                if not data:
                    raise ConnectionError("the server closed the connection")
                for frame in self._peer_check.feed(self._decoder, data):
                    if frame.request_id == 0 and frame.is_error:
                        # A connection-level error (bad frame, limits): the server closes.
                        raise decode_error(frame)
                    with self._lock:
                        entry = self._pending.pop(frame.request_id, None)
                    if entry is None:
                        continue  # a request we stopped waiting for (time-out)
                    _op, fut, decode = entry
                    outcome = outcome_of(frame, decode)
                    if isinstance(outcome, NotPrimary):
                        self.redirect = outcome.primary or ""
                    try:
                        if isinstance(outcome, BaseException):
                            fut.set_exception(outcome)
                        else:
                            fut.set_result(outcome)
                    except InvalidStateError:
                        pass  # it timed out just now (forget): the answer is dropped
        except (OSError, FMQError) as exc:
            self._shutdown(exc)
        except BaseException as exc:  # noqa: BLE001 - never leave futures hanging
            self._shutdown(exc)
            raise

    def _shutdown(self, cause: BaseException) -> None:
        with self._lock:
            if self._closed is None:
                self._closed = cause
            pending, self._pending = self._pending, {}
            never_written = set(self._held.request_ids)
            self._held.take()
            self._held_cond.notify_all()  # the flusher ends
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        err = self._lost()
        unsent = not_sent_error(self.address, self._closed) if never_written else err
        for rid, (_op, fut, _decode) in pending.items():
            if not fut.done():
                fut.set_exception(unsent if rid in never_written else err)

    def close(self) -> None:
        self._shutdown(ConnectionError("closed by the client"))
        try:
            self._sock.close()
        except OSError:
            pass
