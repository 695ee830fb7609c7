"""One client connection of the server: framing and request ids, nothing else.

Bytes are parsed as they arrive (:class:`fmq.protocol.FrameDecoder`); every request runs as
its own task, so one connection can have many in flight, and each answer is written as soon
as it is ready, carrying its request's id (pipelining). Bad framing gets an error answer and
closes this connection only. What a request *does* is in :mod:`fmq.server.handlers`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING

from fmq.errors import FMQError, ProtocolError, ServerBusy
from fmq.protocol import (
    PROTOCOL_VERSION,
    SCHEMA,
    Frame,
    FrameDecoder,
    Op,
    decode_request,
    encode_error,
    encode_response,
)
from fmq.server.handlers import from_result, to_message

if TYPE_CHECKING:
    from fmq.server.server import Server

logger = logging.getLogger("fmq.server")


class Connection(asyncio.Protocol):
    """One client socket: parses frames as bytes arrive, runs each request as a task,
    writes each response as soon as it is ready (pipelining)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.id = 0
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(server.config.max_frame_size)
        self.tasks: set[asyncio.Future] = set()  # requests in flight
        self.closing = False  # no more requests will be read
        self.eof = False
        self.lost = False  # the socket is gone: answers can no longer be delivered
        #: Whether it ever polled for feedback (then its leases are returned on close).
        self.leases_taken = False
        self._paused = False

    # ------------------------------------------------------------------ asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:  # answers are small and latency matters: no Nagle delay
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.server._connection_made(self)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            # The length prefix is bad: the stream cannot be resynchronised.
            self.fail(0, 0, exc, "bad frame")
            return
        for frame in frames:
            self.on_frame(frame)
            if self.closing:
                return

    def eof_received(self) -> bool:
        if self.decoder.buffered:
            logger.warning("connection %d from %s: closed inside a frame (%d bytes "
                           "buffered)", self.id, self.peer, self.decoder.buffered)
            self.server.protocol_errors += 1
        # Requests in flight still get their answers (half-close); pull long polls end now:
        # nobody will send more.
        self.eof = True
        self.closing = True
        self.server._wake_pullers(self)
        if not self.tasks:
            self.close()
        return True

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closing = True
        self.lost = True
        if self.leases_taken:
            self._return_leases()
        self.server._connection_lost(self)

    def _return_leases(self) -> None:
        """Feedback leases are bound to the connection that polled: once it is gone nobody
        answers for them, so they go back to the producer group at once (in a worker: the
        transaction lock is not taken on the event loop)."""
        srv = self.server
        try:
            srv.run(srv.broker.release_feedback_leases, self)
        except RuntimeError:  # the worker pool is shut down: the broker is closing anyway
            pass

    def pause_writing(self) -> None:
        # The peer does not read its answers: stop reading its requests (back-pressure).
        self._paused = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    # ------------------------------------------------------------------ requests

    def send(self, data: bytes) -> None:
        t = self.transport
        if t is not None and not t.is_closing():
            t.write(data)

    def fail(self, opcode: int, request_id: int, exc: FMQError, why: str) -> None:
        """Answer with an error, then close this connection (malformed input: the stream
        cannot be trusted any more). Other connections are untouched."""
        logger.warning("connection %d from %s: %s: %s; closing it", self.id, self.peer, why, exc)
        self.server.protocol_errors += 1
        self.send(encode_error(opcode, request_id, exc))
        self.close()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # flushes what is buffered first

    def on_frame(self, frame: Frame) -> None:
        srv = self.server
        cfg = srv.config
        if frame.version != PROTOCOL_VERSION or frame.is_response:
            why = ("unsupported protocol version" if frame.version != PROTOCOL_VERSION
                   else "a response frame sent to the server")
            self.fail(frame.opcode, frame.request_id, ProtocolError(
                f"{why} ({frame.version}); this server speaks version {PROTOCOL_VERSION} "
                f"requests, see docs/protocol.md"), "bad frame header")
            return
        if frame.request_id == 0:
            # Id 0 marks connection-level errors: an answer carrying it would make the
            # client fail every request pending on this connection, so treat it as one.
            self.fail(0, 0, ProtocolError(
                "request id 0 is reserved for connection-level errors; number requests from "
                "1 (docs/protocol.md section 1)"), "reserved request id")
            return
        if len(self.tasks) >= cfg.max_in_flight:
            srv.busy_refusals += 1
            self.send(encode_error(frame.opcode, frame.request_id, ServerBusy(
                f"{cfg.max_in_flight} requests of this connection are in flight "
                f"(max_in_flight); wait for answers before sending more")))
            return
        if srv.stopping:
            self.send(encode_error(frame.opcode, frame.request_id, ServerBusy(
                "the server is shutting down; retry against the restarted server")))
            return
        if frame.opcode == Op.SEND:
            self._send_fast(frame)
            return
        task = asyncio.ensure_future(self.handle(frame))
        self.tasks.add(task)
        srv.all_tasks.add(task)
        task.add_done_callback(self._done)

    def _send_fast(self, frame: Frame) -> None:
        """SEND, the hot path, without a task: the batcher's future answers it directly."""
        srv = self.server
        op, rid = frame.opcode, frame.request_id
        try:
            req = decode_request(frame)
        except ProtocolError as exc:
            self.fail(op, rid, exc, "malformed SEND payload")
            return
        srv.requests += 1
        try:
            fut = srv.batcher.submit([to_message(req["message"])])
        except FMQError as exc:
            self.send(encode_error(op, rid, exc))
            return
        self.tasks.add(fut)
        srv.all_tasks.add(fut)

        def answer(f: asyncio.Future) -> None:
            self.tasks.discard(f)  # the slot is free before the answer leaves
            exc = f.exception() if not f.cancelled() else ServerBusy(
                "the send was cancelled by a shutdown; retry against the restarted server")
            if exc is None:
                data = encode_response(op, rid, {"result": from_result(f.result()[0])})
            else:
                if not isinstance(exc, FMQError):
                    logger.error("SEND failed unexpectedly: %r", exc)
                data = encode_error(op, rid, exc)
            self.send(data)
            self._done(f)

        fut.add_done_callback(answer)

    def _done(self, task: asyncio.Future) -> None:
        self.tasks.discard(task)
        self.server.all_tasks.discard(task)
        if self.eof and not self.tasks:
            self.close()

    async def handle(self, frame: Frame) -> None:
        srv = self.server
        op, rid = frame.opcode, frame.request_id
        handler = srv.handlers.get(op)
        if handler is None:
            # Framing is intact, so the connection stays usable: newer clients can probe.
            self.send(encode_error(op, rid, ProtocolError(
                f"unknown opcode {op}; this server knows {sorted(int(o) for o in SCHEMA)}")))
            return
        try:
            srv.limits.check(frame)  # list limits, from the counts, before decoding
        except FMQError as exc:  # this request only: the framing is intact
            srv.requests += 1
            self.send(encode_error(op, rid, exc))
            return
        try:
            req = decode_request(frame)
        except ProtocolError as exc:
            self.fail(op, rid, exc, f"malformed {Op(op).name} payload")
            return
        srv.requests += 1
        try:
            result = await handler(srv, self, req)
            data = encode_response(op, rid, result)
        except FMQError as exc:
            data = encode_error(op, rid, exc)
        except Exception as exc:  # noqa: BLE001 - a bug must not kill the connection
            logger.exception("request %s failed unexpectedly", Op(op).name)
            data = encode_error(op, rid, exc)
        # Free the in-flight slot before the answer leaves: the client may send its next
        # request the moment it reads this one, before the task's done-callback has run.
        self.tasks.discard(asyncio.current_task())
        self.send(data)
