"""One client connection of the server: framing and request ids, nothing else.

Bytes are parsed as they arrive (:class:`fmq.protocol.FrameDecoder`); every request runs as
its own task, so one connection can have many in flight, and each answer is written as soon
as it is ready, carrying its request's id (pipelining). Bad framing gets an error answer and
closes this connection only. What a request *does* is in :mod:`fmq.server.handlers`.

Memory is bounded by the server's byte budgets (:mod:`fmq.server.budgets`): a frame's
declared length is taken from the request budget before its body is read (otherwise the
connection stops being read until there is room), and held until its request finishes;
replies not yet taken by the socket count against the reply budget, and a connection with
more than :data:`WRITE_BACKLOG` of them is not read until its peer reads them. The server's
watchdog asks :meth:`Connection.overdue` for the time-outs (handshake, read, write, idle).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING

from fmq.errors import ConnectionLost, FMQError, ProtocolError, ServerBusy
from fmq.protocol import (
    HEADER_SIZE,
    PROTOCOL_VERSION,
    SCHEMA,
    Frame,
    FrameDecoder,
    Op,
    decode_request,
    encode_error,
    encode_response,
)
from fmq.protocol.values import message_from_wire, result_to_wire

if TYPE_CHECKING:
    from fmq.server.server import Server

logger = logging.getLogger("fmq.server")

#: Unsent reply bytes above which a connection's requests are not read any more (its peer
#: is not reading its answers); reading resumes once they are all sent.
WRITE_BACKLOG = 64 * 1024
#: A frame this small, from a connection that holds no other request bytes, never waits
#: for the total request budget: pings, heartbeats and small sends of real clients keep
#: working while large frames fill the budget. It adds at most this much per connection.
SMALL_FRAME = 64 * 1024

# Why a connection is not being read (bit set): both must clear before it is read again.
_BLOCKED_BY_WRITES = 1
_BLOCKED_BY_BUDGET = 2


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
        self.aborted = False
        self.eof = False
        self.lost = False  # the socket is gone: answers can no longer be delivered
        #: Whether it ever polled for feedback (then its leases are returned on close).
        self.leases_taken = False
        self.established = False  # sent a complete request: counts against max_connections
        now = server.now()
        self.opened_at = now
        self.last_received = now
        #: Since when the frame at the head of the buffer is incomplete (None: no partial
        #: frame, or it waits for the request budget, which is not the peer's fault).
        self.frame_since: float | None = None
        self.requests = server.request_budget.share()
        self.replies = server.reply_budget.share()
        self.receiving = 0  # request bytes admitted for the frame being received
        self.unsent = 0  # reply bytes the transport holds (as of the last look)
        self.drained_at = now  # when unsent reply bytes last went down
        self._held: dict[asyncio.Future, int] = {}  # request bytes per running request
        self._reserved: dict[asyncio.Future, int] = {}  # reply bytes per running request
        self._reply_waits: set[asyncio.Future] = set()
        self._admission = None  # our place in the request budget's queue
        self._granted = 0  # request bytes granted while we waited, not yet used
        self._read_blocks = 0

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
        # Low-water mark 0: resume_writing means "everything sent", which is when the
        # reply budget gets its bytes back and reading resumes.
        self.transport.set_write_buffer_limits(high=WRITE_BACKLOG, low=0)
        self.server._connection_made(self)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        now = self.server.now()
        self.last_received = now
        self._parse(data, now)

    def _parse(self, data: bytes, now: float) -> None:
        try:
            frames = self.decoder.feed(data, self._admit)
        except ProtocolError as exc:
            # The length prefix is bad: the stream cannot be resynchronised.
            self.fail(0, 0, exc, "bad frame")
            return
        if frames or self.frame_since is None:
            self.frame_since = (now if self.decoder.buffered and self._admission is None
                                else None)
        for frame in frames:
            size = HEADER_SIZE + len(frame.payload)
            self.receiving -= size  # from now on the request holds these bytes
            self.on_frame(frame, size)
            if self.closing:
                return

    # ------------------------------------------------------------------ request budget

    def _admit(self, n: int) -> bool:
        """May the frame of ``n`` bytes whose length was just read be received?"""
        share = self.requests
        budget = share.budget
        if self._granted:
            n, self._granted = self._granted, 0
        elif n <= SMALL_FRAME and share.used == 0:
            budget.take(share, n)
        elif not budget.try_take(share, n, n):
            waiter = budget.wait(share, n, n, self._admitted)
            if not self._granted:  # not granted at once: stop reading until it is
                self._admission = waiter
                self._block_read(_BLOCKED_BY_BUDGET)
                return False
            n, self._granted = self._granted, 0
        self.receiving += n
        return True

    def _admitted(self, n: int) -> None:
        if self.closing:
            self.requests.budget.release(self.requests, n)
            return
        self._granted = n
        if self._admission is not None:  # granted later: read on
            self._admission = None
            self._unblock_read(_BLOCKED_BY_BUDGET)
            self.server._loop.call_soon(self._parse_buffered)

    def _parse_buffered(self) -> None:
        if not self.closing:
            self._parse(b"", self.server.now())

    def _release_request(self, size: int) -> None:
        self.requests.budget.release(self.requests, size)

    def _block_read(self, why: int) -> None:
        if not self._read_blocks and self.transport is not None \
                and not self.transport.is_closing():
            self.transport.pause_reading()
        self._read_blocks |= why

    def _unblock_read(self, why: int) -> None:
        if not self._read_blocks & why:
            return
        self._read_blocks &= ~why
        if not self._read_blocks and self.transport is not None \
                and not self.transport.is_closing():
            self.transport.resume_reading()

    # ------------------------------------------------------------------ reply budget

    async def reserve_reply(self, want: int, minimum: int) -> int:
        """Take between ``minimum`` and ``want`` reply bytes for the running request
        (waiting for room); they are released when its reply is written."""
        share = self.replies
        budget = share.budget
        n = budget.try_take(share, minimum, want)
        if not n:
            fut = self.server._loop.create_future()

            def grant(k: int) -> None:
                if fut.done():  # the request was cancelled meanwhile
                    budget.release(share, k)
                else:
                    fut.set_result(k)

            waiter = budget.wait(share, minimum, want, grant)
            self._reply_waits.add(fut)
            try:
                n = await fut
            except BaseException:
                budget.cancel(waiter)
                raise
            finally:
                self._reply_waits.discard(fut)
        task = asyncio.current_task()
        self._reserved[task] = self._reserved.get(task, 0) + n
        return n

    def unreserve_reply(self, n: int) -> None:
        """Give back reply bytes of the running request it will not use."""
        task = asyncio.current_task()
        self._reserved[task] -= n
        self.replies.budget.release(self.replies, n)

    def _settle_reply(self, task: asyncio.Future) -> None:
        n = self._reserved.pop(task, 0)
        if n:
            self.replies.budget.release(self.replies, n)

    def _sync_unsent(self, reserved: int = 0) -> None:
        """Count what the transport still holds against the reply budget; ``reserved``
        bytes reserved for the reply just written move over to it."""
        # A closing transport still holds what it has to flush: that counts too.
        size = self.transport.get_write_buffer_size() if self.transport is not None else 0
        delta = size - self.unsent
        if delta > 0 and not self.unsent or delta < 0:
            self.drained_at = self.server.now()
        self.unsent = size
        net = delta - reserved
        if net > 0:
            self.replies.budget.take(self.replies, net)
        else:
            self.replies.budget.release(self.replies, -net)

    # ------------------------------------------------------------------ time-outs

    def overdue(self, now: float) -> str | None:
        """Why this connection has to be closed now, if it has to (the server's watchdog
        asks every connection about once a second)."""
        cfg = self.server.config
        if not self.established and now - self.opened_at > cfg.handshake_timeout_ms / 1000:
            return (f"no complete request within handshake_timeout_ms "
                    f"({cfg.handshake_timeout_ms} ms)")
        if (cfg.read_timeout_ms and self.frame_since is not None
                and now - self.frame_since > cfg.read_timeout_ms / 1000):
            return (f"a frame stayed incomplete for more than read_timeout_ms "
                    f"({cfg.read_timeout_ms} ms, {self.decoder.buffered} bytes buffered)")
        if self.unsent:
            self._sync_unsent()
            if (self.unsent and cfg.write_timeout_ms
                    and now - self.drained_at > cfg.write_timeout_ms / 1000):
                return (f"the peer read none of its {self.unsent} unsent reply bytes for more "
                        f"than write_timeout_ms ({cfg.write_timeout_ms} ms)")
        elif (cfg.idle_timeout_ms and not self.tasks
              and now - self.last_received > cfg.idle_timeout_ms / 1000):
            return f"idle for more than idle_timeout_ms ({cfg.idle_timeout_ms} ms)"
        return None

    def abort(self, why: str) -> None:
        """Close at once, dropping unsent replies (time-outs, making room)."""
        logger.warning("connection %d from %s: %s; closing it", self.id, self.peer, why)
        self.closing = self.aborted = True
        if self.transport is not None:
            self.transport.abort()

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
        # Give back what only this connection held: the frame being received, replies the
        # socket will never send. Requests still running release theirs when they end.
        if self._admission is not None:
            self.requests.budget.cancel(self._admission)
            self._admission = None
        self._release_request(self.receiving + self._granted)
        self.receiving = self._granted = 0
        self.replies.budget.release(self.replies, self.unsent)
        self.unsent = 0
        self.replies.budget.cancel_share(self.replies)
        for fut in list(self._reply_waits):
            if not fut.done():
                fut.set_exception(ConnectionLost("the connection closed while the request "
                                                 "waited for the reply budget"))
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
        self._block_read(_BLOCKED_BY_WRITES)

    def resume_writing(self) -> None:
        self._sync_unsent()  # everything sent
        self._unblock_read(_BLOCKED_BY_WRITES)

    # ------------------------------------------------------------------ requests

    def send(self, data: bytes, reserved: int = 0) -> None:
        """Write ``data``; ``reserved``: reply bytes reserved for it, given back now."""
        t = self.transport
        if t is not None and not t.is_closing():
            t.write(data)
            if reserved or t.get_write_buffer_size() != self.unsent:
                self._sync_unsent(reserved)
        elif reserved:
            self.replies.budget.release(self.replies, reserved)

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

    def on_frame(self, frame: Frame, size: int) -> None:
        """Start the request in ``frame``; it holds ``size`` request bytes until it ends."""
        srv = self.server
        cfg = srv.config
        if not self.established and not srv._establish(self):
            self._release_request(size)
            return
        if frame.version != PROTOCOL_VERSION or frame.is_response:
            self._release_request(size)
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
            self._release_request(size)
            srv.busy_refusals += 1
            self.send(encode_error(frame.opcode, frame.request_id, ServerBusy(
                f"{cfg.max_in_flight} requests of this connection are in flight "
                f"(max_in_flight); wait for answers before sending more")))
            return
        if srv.stopping:
            self._release_request(size)
            self.send(encode_error(frame.opcode, frame.request_id, ServerBusy(
                "the server is shutting down; retry against the restarted server")))
            return
        if frame.opcode == Op.SEND:
            self._send_fast(frame, size)
            return
        task = asyncio.ensure_future(self.handle(frame))
        self.tasks.add(task)
        srv.all_tasks.add(task)
        self._held[task] = size
        task.add_done_callback(self._done)

    def _send_fast(self, frame: Frame, size: int) -> None:
        """SEND, the hot path, without a task: the batcher's future answers it directly."""
        srv = self.server
        op, rid = frame.opcode, frame.request_id
        try:
            req = decode_request(frame)
        except ProtocolError as exc:
            self._release_request(size)
            self.fail(op, rid, exc, "malformed SEND payload")
            return
        srv.requests += 1
        try:
            fut = srv.batcher.submit([message_from_wire(req["message"])])
        except FMQError as exc:
            self._release_request(size)
            self.send(encode_error(op, rid, exc))
            return
        self.tasks.add(fut)
        self._held[fut] = size
        srv.all_tasks.add(fut)

        def answer(f: asyncio.Future) -> None:
            self.tasks.discard(f)  # the slot is free before the answer leaves
            exc = f.exception() if not f.cancelled() else ServerBusy(
                "the send was cancelled by a shutdown; retry against the restarted server")
            if exc is None:
                data = encode_response(op, rid, {"result": result_to_wire(f.result()[0])})
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
        self._release_request(self._held.pop(task, 0))
        if self._reserved:
            self._settle_reply(task)
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
        task = asyncio.current_task()
        self.tasks.discard(task)
        # What the socket did not take stays counted: the reservation becomes unsent bytes.
        self.send(data, self._reserved.pop(task, 0))
