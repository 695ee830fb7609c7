"""One client's session with the server: one socket, its framing and request ids, nothing
else.

Bytes are parsed as they arrive (:class:`fmq.protocol.FrameDecoder`); every request is
dispatched through the handler table (:data:`fmq.server.handlers.HANDLERS`) and runs on its
own, so one session can have many in flight, and each answer is written as soon as it is
ready, carrying its request's id (pipelining). Bad framing gets an error answer and closes
this session only. What a request *does* is in :mod:`fmq.server.handlers`; what the session
may use of the server is its :class:`~fmq.server.context.ServerContext`.

Memory is bounded by the server's byte budgets (:mod:`fmq.server.budgets`): a frame's
declared length is taken from the request budget before its body is read (otherwise the
connection stops being read until there is room), and held until its request finishes;
replies not yet taken by the socket count against the reply budget, and a connection with
more than :data:`WRITE_BACKLOG` of them is not read until its peer reads them. The server's
watchdog asks :meth:`ClientSession.overdue` for the time-outs (handshake, read, write, idle).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket

from fmq.errors import FMQError, LeadershipLost, NotPrimary, ProtocolError, ServerBusy
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
from fmq.server.authz import refusal as access_refusal
from fmq.server.context import ServerContext
from fmq.server.handlers import HANDLERS
from fmq.server.reply_account import ReplyAccount
from fmq.server.request_admission import RequestAdmission

logger = logging.getLogger("fmq.server")

#: Unsent reply bytes above which a connection's requests are not read any more (its peer
#: is not reading its answers); reading resumes once they are all sent.
WRITE_BACKLOG = 64 * 1024

# Why a connection is not being read (bit set): both must clear before it is read again.
_BLOCKED_BY_WRITES = 1
_BLOCKED_BY_BUDGET = 2


class ClientSession(asyncio.Protocol):
    """One client socket: parses frames as bytes arrive, runs each request on its own,
    writes each response as soon as it is ready (pipelining)."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.id = 0
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(ctx.config.max_frame_size)
        self.tasks: set[asyncio.Future] = set()  # requests in flight
        self.closing = False  # no more requests will be read
        self.aborted = False
        self.eof = False
        self.lost = False  # the socket is gone: answers can no longer be delivered
        #: Whether it ever polled for feedback (then its leases are returned on close).
        self.leases_taken = False
        self.established = False  # sent a complete request: counts against max_connections
        self.principal: str | None = None  # the authenticated user (fmq.server.authn)
        self.scram = None
        self.auth_failures = 0
        now = ctx.now()
        self.opened_at = now
        self.last_received = now
        #: Since when the frame at the head of the buffer is incomplete (None: no partial
        #: frame, or it waits for the request budget, which is not the peer's fault).
        self.frame_since: float | None = None
        self.admission = RequestAdmission(
            ctx.request_budget.share(), accepting=lambda: not self.closing,
            pause=lambda: self._block_read(_BLOCKED_BY_BUDGET), resume=self._admitted_later,
            logged_in=lambda: self.principal is not None or not ctx.authenticator.enforcing)
        self.replies = ReplyAccount(ctx.reply_budget.share(), lambda: ctx.loop)
        self._held: dict[asyncio.Future, int] = {}  # request bytes per running request
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
        self.ctx.hooks.session_opened(self)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        now = self.ctx.now()
        self.last_received = now
        self._parse(data, now)

    def _parse(self, data: bytes, now: float) -> None:
        try:
            frames = self.decoder.feed(data, self.admission.admit)
        except FMQError as exc:
            # The length prefix is bad or refused: the stream cannot be resynchronised.
            self.fail(0, 0, exc, "bad frame")
            return
        if frames or self.frame_since is None:
            self.frame_since = (now if self.decoder.buffered and not self.admission.waiting
                                else None)
        for frame in frames:
            size = HEADER_SIZE + len(frame.payload)
            self.admission.received(size)
            self.on_frame(frame, size)
            if self.closing:
                return

    # ------------------------------------------------------------------ request budget

    def _admitted_later(self) -> None:
        self._unblock_read(_BLOCKED_BY_BUDGET)
        self.ctx.loop.call_soon(self._parse_buffered)

    def _parse_buffered(self) -> None:
        if not self.closing:
            self._parse(b"", self.ctx.now())

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
        return await self.replies.reserve(want, minimum)

    def unreserve_reply(self, n: int) -> None:
        """Give back reply bytes of the running request it will not use."""
        self.replies.unreserve(n)

    def _sync_unsent(self, reserved: int = 0) -> None:
        # A closing transport still holds what it has to flush: that counts too.
        t = self.transport
        self.replies.sync_unsent(t.get_write_buffer_size() if t is not None else 0, reserved)

    # ------------------------------------------------------------------ time-outs

    def overdue(self, now: float) -> str | None:
        """Why this connection has to be closed now, if it has to (the server's watchdog
        asks every connection about once a second)."""
        cfg = self.ctx.config
        if not self.established and now - self.opened_at > cfg.handshake_timeout_ms / 1000:
            return (f"no complete request within handshake_timeout_ms "
                    f"({cfg.handshake_timeout_ms} ms)")
        if (cfg.read_timeout_ms and self.frame_since is not None
                and now - self.frame_since > cfg.read_timeout_ms / 1000):
            return (f"a frame stayed incomplete for more than read_timeout_ms "
                    f"({cfg.read_timeout_ms} ms, {self.decoder.buffered} bytes buffered)")
        replies = self.replies
        if replies.unsent:
            self._sync_unsent()
            if (replies.unsent and cfg.write_timeout_ms
                    and now - replies.drained_at > cfg.write_timeout_ms / 1000):
                return (f"the peer read none of its {replies.unsent} unsent reply bytes for more "
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
        self.admission.close()  # nobody sends the rest of a frame cut off here: it goes now
        if dropped := self.decoder.discard():
            logger.warning("connection %d from %s: closed inside a frame (%d bytes "
                           "dropped)", self.id, self.peer, dropped)
            self.ctx.counters.protocol_errors += 1
        # Requests in flight still get their answers (half-close); pull long polls end now:
        # nobody will send more.
        self.eof = True
        self.closing = True
        self.ctx.wakeups.session_closed(self.id)
        if not self.tasks:
            self.close()
        return True

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closing = True
        self.lost = True
        if self.leases_taken:
            self._return_leases()
        # Drop what only this connection held now, not once the collector finds it: the frame
        # being received, unsent replies. Running requests release theirs when they end.
        self.decoder.discard()
        self.admission.close()
        self.replies.close()
        self.ctx.hooks.session_closed(self)

    def _return_leases(self) -> None:
        """Feedback leases are bound to the connection that polled: once it is gone nobody
        answers for them, so they go back to the producer group at once (in a worker: the
        transaction lock is not taken on the event loop)."""
        ctx = self.ctx
        try:
            ctx.run(ctx.broker.release_feedback_leases, self)
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
            if reserved or t.get_write_buffer_size() != self.replies.unsent:
                self._sync_unsent(reserved)
        else:
            self.replies.release(reserved)

    def fail(self, opcode: int, request_id: int, exc: FMQError, why: str) -> None:
        """Answer with an error, then close this connection (malformed input: the stream
        cannot be trusted any more). Other connections are untouched."""
        logger.warning("connection %d from %s: %s: %s; closing it", self.id, self.peer, why, exc)
        self.ctx.counters.protocol_errors += 1
        self.send(encode_error(opcode, request_id, exc))
        self.close()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # flushes what is buffered first

    def on_frame(self, frame: Frame, size: int) -> None:
        """Start the request in ``frame``; it holds ``size`` request bytes until it ends."""
        ctx = self.ctx
        op, rid = frame.opcode, frame.request_id
        if not self.established and not ctx.hooks.first_request(self):
            self.admission.release(size)
            return
        if frame.version != PROTOCOL_VERSION or frame.is_response:
            self.admission.release(size)
            why = ("unsupported protocol version" if frame.version != PROTOCOL_VERSION
                   else "a response frame sent to the server")
            self.fail(op, rid, ProtocolError(
                f"{why} ({frame.version}); this server speaks version {PROTOCOL_VERSION} "
                f"requests, see docs/protocol.md"), "bad frame header")
            return
        if rid == 0:
            # Id 0 marks connection-level errors: an answer carrying it would make the
            # client fail every request pending on this session, so treat it as one.
            self.fail(0, 0, ProtocolError(
                "request id 0 is reserved for connection-level errors; number requests from "
                "1 (docs/protocol.md section 1)"), "reserved request id")
            return
        refusal = refusal_before_decoding(ctx, len(self.tasks), frame)
        if refusal is not None:
            self.admission.release(size)
            self.send(encode_error(op, rid, refusal))
            return
        try:
            req = decode_request(frame)
        except ProtocolError as exc:
            self.admission.release(size)
            self.fail(op, rid, exc, f"malformed {Op(op).name} payload")
            return
        ctx.counters.requests += 1
        ctx.counters.by_op[op] += 1
        refused = access_refusal(ctx, self, op, req) if ctx.authenticator.enforcing else None
        if refused is not None:
            self.admission.release(size)
            ctx.counters.failed(op, refused)
            self.send(encode_error(op, rid, refused))
            return
        try:
            # A coroutine becomes a task; SEND's handler returns a future and needs none.
            request = asyncio.ensure_future(HANDLERS[op](ctx, self, req))
        except FMQError as exc:  # refused before it started (a send that cannot be stored)
            self.admission.release(size)
            ctx.counters.failed(op, exc)
            self.send(encode_error(op, rid, exc))
            return
        self.tasks.add(request)
        ctx.all_tasks.add(request)
        self._held[request] = size
        request.add_done_callback(functools.partial(self._answer, op, rid))

    def _answer(self, op: int, rid: int, request: asyncio.Future) -> None:
        # Free the in-flight slot before the answer leaves: the client may send its next
        # request the moment it reads this one.
        self.tasks.discard(request)
        exc = request.exception() if not request.cancelled() else ServerBusy(
            "the request was cancelled by a shutdown; retry against the restarted server")
        exc = fencing_refusal(self.ctx, op) if exc is None else exc
        if exc is None:
            try:
                data = encode_response(op, rid, request.result())
            except Exception as enc:  # noqa: BLE001 - a bug must not kill the session
                exc = enc
        if exc is not None:
            self.ctx.counters.failed(op, exc)
            if not isinstance(exc, FMQError):
                logger.error("request %s failed unexpectedly", Op(op).name, exc_info=exc)
            data = encode_error(op, rid, exc)
        # What the socket did not take stays counted: the reservation becomes unsent bytes.
        self.send(data, self.replies.take_reservation(request))
        self._done(request)

    def _done(self, request: asyncio.Future) -> None:
        self.tasks.discard(request)
        self.ctx.all_tasks.discard(request)
        self.admission.release(self._held.pop(request, 0))
        self.replies.settle(request)
        if self.eof and not self.tasks:
            self.close()


#: What a follower refuses: writes (its log changes only by what its primary ships) and
#: the feedback that would end transactions.
FOLLOWER_REFUSES = frozenset({
    Op.SEND, Op.SEND_BATCH, Op.PREPARE, Op.COMMIT, Op.ROLLBACK, Op.POLL_UNCERTAIN,
    Op.ANSWER_UNCERTAIN, Op.RESOLVE_TX, Op.COMMIT_OFFSET, Op.RESET_OFFSETS, Op.SEND_AT,
    Op.NACK, Op.DLQ_REDRIVE})


def fencing_refusal(ctx: ServerContext, op: int) -> FMQError | None:
    """A write done but not to be acknowledged: this primary cannot prove it still holds
    the group's lease (etcd), which another node may hold by now. Checked as the answer is
    released, after the fsync and the replication wait."""
    role = ctx.replication
    if op in FOLLOWER_REFUSES and role is not None and not role.acknowledges():
        return LeadershipLost(role.primary or "")
    return None


def refusal_before_decoding(ctx: ServerContext, in_flight: int, frame: Frame
                            ) -> FMQError | None:
    """Why a well-framed request is refused before it is decoded, if it is (the framing is
    intact: its session stays open). ``in_flight``: requests its session runs now."""
    op = frame.opcode
    if in_flight >= ctx.config.max_in_flight:
        ctx.counters.busy_refusals += 1
        return ServerBusy(
            f"{ctx.config.max_in_flight} requests of this connection are in flight "
            f"(max_in_flight); wait for answers before sending more")
    if ctx.stopping:
        return ServerBusy("the server is shutting down; retry against the restarted server")
    primary = ctx.replication.primary if ctx.replication is not None else None
    if primary is not None and op in FOLLOWER_REFUSES:
        return NotPrimary(primary)
    if op not in HANDLERS:
        # Framing is intact, so the session stays usable: newer clients can probe.
        return ProtocolError(
            f"unknown opcode {op}; this server knows {sorted(int(o) for o in SCHEMA)}")
    try:
        ctx.limits.check(frame)  # list limits, from the counts, before decoding
    except FMQError as exc:
        ctx.counters.requests += 1
        return exc
    return None
