"""One client's session with the server: one socket, its framing, its budgets and its
time-outs.

Bytes are parsed as they arrive (:class:`fmq.protocol.FrameDecoder`); every complete frame
goes to the session's :class:`~fmq.server.net.session_requests.SessionRequests`, which refuses it
or starts its request, so one session can have many in flight, each answered as soon as it
is ready (pipelining). Bad framing gets an error answer and closes this session only. What a
request *does* is in :mod:`fmq.server.ops.handlers`; what the session may use of the server is
its :class:`~fmq.server.context.ServerContext`.

Memory is bounded by the server's byte budgets (:mod:`fmq.server.net.budgets`): a frame's
declared length is taken from the request budget before its body is read (otherwise the
connection stops being read until there is room), and held until its request finishes;
replies not yet taken by the socket count against the reply budget, and a connection with
more than :data:`WRITE_BACKLOG` of them is not read until its peer reads them. The server's
watchdog asks :meth:`ClientSession.overdue` for the time-outs (handshake, read, write, idle).
"""

from __future__ import annotations

import asyncio
import logging
import socket

from fmq.errors import FMQError
from fmq.protocol import FrameDecoder, encode_error
from fmq.server.context import ServerContext
from fmq.server.net.answer_writes import socket_fd
from fmq.server.net.reply_account import ReplyAccount
from fmq.server.net.request_admission import RequestAdmission
from fmq.server.net.session_requests import SessionRequests

logger = logging.getLogger("fmq.server")

#: Unsent reply bytes above which a connection's requests are not read any more (its peer
#: is not reading its answers); reading resumes once they are all sent.
WRITE_BACKLOG = 64 * 1024
#: An answer in parts (:meth:`ClientSession.send_parts`) whose parts are smaller than this
#: on average, or that has more than :data:`MOST_PARTS`, is joined and written as one
#: piece: the transport's write of a list costs uvloop per part (a vector entry, a buffer
#: view taken and released, and more when the socket takes only some of it), more than
#: copying a few KiB; a window of 64 PULL answers of 8 messages written as 192 parts cost
#: 168,000 instructions a PULL against 156,000 joined
#: (bench/read_request_instructions.py --only pull --messages 8 --requests 128).
PART_BYTES = 8192
MOST_PARTS = 3

# Why a connection is not being read (bit set): both must clear before it is read again.
_BLOCKED_BY_WRITES = 1
_BLOCKED_BY_BUDGET = 2


class ClientSession(asyncio.Protocol):
    """One client socket: parses frames as bytes arrive and hands each to its requests
    (:class:`SessionRequests`), writes answers, keeps its budgets and time-outs."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.requests = SessionRequests(self)
        self.id = 0
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(ctx.config.max_frame_size)
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
        self._read_blocks = 0
        #: While the send pipeline's answers are held (a hand-back's callback runs), this
        #: session's answers wait here and are written in one piece when it ends.
        self.answer_writes = ctx.batcher.answer_writes if ctx.batcher is not None else None
        #: Flushes handed back and not answered yet (the send pipeline's): a read answers
        #: them before its own requests (:meth:`SendBatcher.answer_handed_back`).
        self._handed_back = ctx.batcher.handed_back if ctx.batcher is not None else ()
        self._held: list[bytes] | None = None
        self._held_reserved = 0
        #: The socket those answers may be sent to directly (-1: always the transport).
        self._answer_fd = -1

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
        self._answer_fd = socket_fd(transport)
        self.ctx.hooks.session_opened(self)

    def data_received(self, data: bytes) -> None:
        if self._handed_back:
            self.ctx.batcher.answer_handed_back()  # type: ignore[union-attr]
        if self.closing:
            return
        now = self.ctx.now()
        self.last_received = now
        self._parse(data, now)

    def _parse(self, data: bytes, now: float) -> None:
        try:
            frames = self.decoder.feed(data, self.admission)
        except FMQError as exc:
            # The length prefix is bad or refused: the stream cannot be resynchronised.
            self.fail(0, 0, exc, "bad frame")
            return
        if frames or self.frame_since is None:
            self.frame_since = (now if self.decoder.buffered and not self.admission.waiting
                                else None)
        if frames:
            self.requests.start_frames(frames)

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
        elif (cfg.idle_timeout_ms and not self.requests.in_flight()
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
        if not self.requests.in_flight():
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
            ctx.run(ctx.broker.transactions.release_feedback_leases, self)
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
        """Write ``data``; ``reserved``: reply bytes reserved for it, given back now (while
        the send pipeline's answers are held, :class:`AnswerWrites`: once they are written)."""
        held = self._held
        if held is not None:
            held.append(data)
            self._held_reserved += reserved
            return
        writes = self.answer_writes
        if writes is not None and writes.holding:
            self._held = [data]
            self._held_reserved = reserved
            writes.keep(self)
            return
        self._write(data, reserved)

    def send_parts(self, parts: list[bytes], reserved: int = 0) -> None:
        """:meth:`send` of the bytes of ``parts``, one after the other, without joining them
        first where that is a copy saved: kept with the answers held (joined once with
        them), or, when they are few and :data:`PART_BYTES` a part on average or more (a
        large PULL answer's header, messages and range), given to the transport as they are
        (``writelines``: uvloop sends them in one system call, with no copy; asyncio's loop
        joins them itself)."""
        held = self._held
        if held is not None:
            held.extend(parts)
            self._held_reserved += reserved
            return
        writes = self.answer_writes
        if writes is not None and writes.holding:
            self._held = list(parts)
            self._held_reserved = reserved
            writes.keep(self)
            return
        if len(parts) > MOST_PARTS or sum(map(len, parts)) < PART_BYTES * len(parts):
            self._write(b"".join(parts), reserved)
        else:
            self._write_parts(parts, reserved)

    def write_held(self) -> None:
        """Write the answers kept while the send pipeline's were held, in one piece."""
        held, reserved = self._held, self._held_reserved
        if held is None:
            return
        self._held, self._held_reserved = None, 0
        self._write(held[0] if len(held) == 1 else b"".join(held), reserved)

    def held_for_socket(self) -> tuple[int, bytes] | None:
        """The socket and the kept answers in one piece, taken, when they may be sent to it
        directly (:class:`AnswerWrites`): a plain TCP transport, open, holding no unsent
        bytes they could overtake. Else None, and they stay kept (:meth:`write_held`)."""
        held, t = self._held, self.transport
        if (held is None or self._answer_fd < 0 or t is None or t.is_closing()
                or t.get_write_buffer_size()):
            return None
        self._held = None
        return self._answer_fd, held[0] if len(held) == 1 else b"".join(held)

    def write_held_rest(self, data: bytes, sent: int) -> None:
        """``data`` from :meth:`held_for_socket`, of which the socket took ``sent`` bytes:
        the rest through the transport (which buffers it, or meets the socket's error and
        closes), and the reply bytes held for them settled."""
        reserved, self._held_reserved = self._held_reserved, 0
        self._write(data, reserved, sent)

    def _write(self, data: bytes, reserved: int, sent: int = 0) -> None:
        t = self.transport
        if t is not None and not t.is_closing():
            if sent < len(data):
                t.write(data[sent:] if sent else data)
            if reserved or t.get_write_buffer_size() != self.replies.unsent:
                self._sync_unsent(reserved)
        else:
            self.replies.release(reserved)

    def _write_parts(self, parts: list[bytes], reserved: int) -> None:
        """:meth:`_write` of the bytes of ``parts``, handed to the transport as they are."""
        t = self.transport
        if t is not None and not t.is_closing():
            t.writelines(parts)
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
        self.write_held()  # answers kept go first: the transport flushes them as it closes
        self.closing = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # flushes what is buffered first
