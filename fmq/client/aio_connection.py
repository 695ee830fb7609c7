"""One asyncio TCP connection to an FMQ server: framing and request-id matching.

The same frames, codec and error rules as the threaded :class:`~fmq.client.Connection`
(``fmq.protocol``, :func:`~fmq.client.connection.outcome_of`); only the I/O differs: a
reader task on :func:`asyncio.open_connection`'s stream completes asyncio futures.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
from collections.abc import Callable
from typing import Any

from fmq.errors import FMQError, NotPrimary
from fmq.protocol import Frame, FrameDecoder, Op, decode_error, decode_response, encode_request

from .acquire import Ask, Drop, Open, Search, search_steps
from .auth import Credentials
from .connection import (
    CLIENT_MAX_FRAME,
    PeerCheck,
    cannot_connect,
    lost_error,
    not_sent_error,
    outcome_of,
    timed_out_error,
)
from .discovery import Finder
from .tls import handshake_failed


class AsyncConnection:
    """Open with :meth:`open`; use from the event loop that opened it."""

    def __init__(self, address: tuple[str, int], reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, max_frame: int, max_in_flight: int) -> None:
        self.address = address
        self._reader = reader
        self._writer = writer
        self._decoder = FrameDecoder(max_frame)
        self._peer_check = PeerCheck(address)
        self._pending: dict[int, tuple[asyncio.Future, Callable[[Frame], Any]]] = {}
        self._ids = itertools.count(1)  # id 0 is reserved for connection-level errors
        self._closed: BaseException | None = None
        #: As :attr:`fmq.client.Connection.redirect`.
        self.redirect: str | None = None
        #: Requests of ``request`` in flight; a batching sender counts its own.
        self._slots = asyncio.Semaphore(max_in_flight)
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def open(cls, address: tuple[str, int], connect_timeout: float,
                   max_in_flight: int = 128, max_frame: int = CLIENT_MAX_FRAME,
                   tls: ssl.SSLContext | None = None) -> AsyncConnection:
        tls_args = {} if tls is None else {"ssl": tls, "server_hostname": address[0],
                                           "ssl_handshake_timeout": connect_timeout}
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(address[0], address[1], **tls_args), connect_timeout)
        except ssl.SSLError as exc:
            raise handshake_failed(address, exc) from None
        except (TimeoutError, OSError) as exc:
            raise cannot_connect(address, exc) from None
        return cls(address, reader, writer, max_frame, max_in_flight)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def submit_encoded(self, op: Op, build: Callable[[int], bytes],
                       decode: Callable[[Frame], Any]) -> asyncio.Future:
        """Write the frame ``build(request_id)`` returns; the future resolves to
        ``decode(answer)`` or the server's error. Raises (ConnectionLost) only when
        nothing was written. Call :meth:`drain` now and then: writing does not wait."""
        if self._closed is not None:
            raise not_sent_error(self.address, self._closed)
        rid = next(self._ids)
        data = build(rid)
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = (fut, decode)
        self._writer.write(data)
        return fut

    async def drain(self) -> None:
        """Wait while the socket's send buffer is full (a failure fails the requests)."""
        try:
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:
            self._shutdown(exc)

    async def request(self, op: Op, fields: dict[str, Any], timeout: float) -> dict[str, Any]:
        async with self._slots:
            fut = self.submit_encoded(op, lambda rid: encode_request(op, rid, fields),
                                      decode_response)
            await self.drain()
            try:
                return await asyncio.wait_for(asyncio.shield(fut), timeout)
            except TimeoutError:
                err = timed_out_error(op, self.address, timeout)
                self.forget(fut, err)
                raise err from None

    def forget(self, fut: asyncio.Future, error: BaseException) -> None:
        """Stop waiting for ``fut`` (a late answer is dropped) and fail it with ``error``."""
        for rid, (f, _decode) in list(self._pending.items()):
            if f is fut:
                del self._pending[rid]
        if not fut.done():
            fut.set_exception(error)

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(1 << 18)
                if not data:
                    raise ConnectionError("the server closed the connection")
                for frame in self._peer_check.feed(self._decoder, data):
                    if frame.request_id == 0 and frame.is_error:
                        raise decode_error(frame)  # connection-level: the server closes
                    entry = self._pending.pop(frame.request_id, None)
                    if entry is None or entry[0].done():
                        continue  # a request we stopped waiting for (time-out)
                    fut, decode = entry
                    outcome = outcome_of(frame, decode)
                    if isinstance(outcome, NotPrimary):
                        self.redirect = outcome.primary or ""
                    if isinstance(outcome, BaseException):
                        fut.set_exception(outcome)
                    else:
                        fut.set_result(outcome)
        except (OSError, FMQError) as exc:
            self._shutdown(exc)
        except asyncio.CancelledError:
            self._shutdown(ConnectionError("closed by the client"))
            raise
        except BaseException as exc:  # noqa: BLE001 - never leave futures hanging
            self._shutdown(exc)
            raise

    def _shutdown(self, cause: BaseException) -> None:
        if self._closed is None:
            self._closed = cause
        pending, self._pending = self._pending, {}
        self._writer.close()
        err = lost_error(self.address, self._closed)
        for fut, _decode in pending.values():
            if not fut.done():
                fut.set_exception(err)

    async def close(self) -> None:
        self._shutdown(ConnectionError("closed by the client"))
        if self._task is not asyncio.current_task():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(OSError, RuntimeError):
            await self._writer.wait_closed()


async def find_node(finder: Finder, connect_timeout: float, max_in_flight: int,
                    tls: ssl.SSLContext | None, credentials: Credentials | None,
                    request_timeout: float, backoff: Callable[[int], float]
                    ) -> tuple[AsyncConnection, dict[str, Any]]:
    """A connection to the node ``finder`` looks for, logged in when there are
    ``credentials``, and its PING answer: the threaded client's search
    (:func:`~fmq.client.acquire.search_steps`), each step awaited."""
    search = Search(search_steps(finder, credentials, request_timeout, connect_timeout,
                                 backoff, ping=True))
    conn: AsyncConnection | None = None
    outcome: Any = None
    while (step := search.advance(outcome)) is not None:
        outcome = None
        try:
            if isinstance(step, Open):
                conn = await AsyncConnection.open(step.address, connect_timeout,
                                                  max_in_flight, tls=tls)
            elif isinstance(step, Ask):
                outcome = await conn.request(step.op, step.fields, step.timeout)
            elif isinstance(step, Drop):
                await conn.close()
            else:
                await asyncio.sleep(step.seconds)
        except FMQError as exc:
            outcome = exc
    return conn, search.found.ping
