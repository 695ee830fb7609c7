"""One session's requests: each complete frame is refused, or decoded and started through the
operation table (:data:`fmq.server.ops.table.OPERATIONS`), its declaration's checks first,
and answered with its request id when it ends (pipelining: many run at once).

A plain SEND or SEND_BATCH takes a shorter step (:meth:`PlainSends.take
<fmq.server.net.plain_sends.PlainSends.take>`, one call for a run of them):
on a server without users and outside a cluster, from an established session, a SEND whose
message (a SEND_BATCH whose every message) passes its own checks as it is decoded
(:data:`~fmq.protocol.message_requests.PLAIN_SEND`, ``PLAIN_SEND_BATCH``, compiled where
the twins are) goes straight to the send pipeline; any other request, and one it declines,
runs the general way, which makes every check again and gives each error. What the step
asks of the session (no users, no cluster, not a follower, established) is asked once per
run of frames (:meth:`SessionRequests.start_frames`). Such a send has no future, done
callback or set entry of its own: its entry in the send pipeline names the session's
:class:`~fmq.server.net.plain_sends.PlainSends`, and its answer is framed from placement's
packed results as they are, with the others of its flush, into its session's answers
(:func:`~fmq.server.net.plain_sends.answer_sends`, compiled where the twins are); the
session is told once per flush (:meth:`SessionRequests.plain_written`).
tests/server/test_plain_send_step.py compares the two ways' answers and stored records, one
request at a time and in pipelined windows.

PREPARE and COMMIT take a short step of their own on such a session when transactions go
through the send pipeline (:meth:`SessionRequests._start_plain_tx`): a PREPARE whose
messages are plain (:func:`~fmq.protocol.message_requests.plain_prepare`) and any
well-formed COMMIT are queued without a task (:class:`~fmq.server.ops.tx_ops.TxSteps`, a
turn's PREPAREs, and its COMMITs, placed by one call of the writer), and answered with the
id or the state framed as they are (:meth:`SessionRequests._answer_tx`); every check past
the decode is the writer's, as on the general way (tests/server/test_plain_tx_step.py).

A frame's request bytes (:class:`~fmq.server.net.request_admission.RequestAdmission`) are given
back at one place: at once when its request does not start (every refusal), else when the
request ends. Its reply bytes (:class:`~fmq.server.net.reply_account.ReplyAccount`) move over
to the answer when it is written.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
from collections.abc import Sequence
from typing import Any, Protocol

from fmq import native
from fmq.errors import ConnectionLost, FMQError, ProtocolError, ServerBusy
from fmq.message import SendResult
from fmq.protocol import (
    HEADER_SIZE,
    PROTOCOL_VERSION,
    SCHEMA,
    Frame,
    Op,
    encode_error,
    encode_response,
)
from fmq.protocol.framing import FLAG_RESPONSE
from fmq.protocol.message_requests import (
    PLAIN_SEND,
    PLAIN_SEND_BATCH,
    decode_server_request,
    plain_commit,
    plain_prepare,
)
from fmq.protocol.read_requests import PullFields, plain_commit_offset, plain_pull
from fmq.protocol.values import state_answer, tx_id_answer
from fmq.server.authz import refusal as access_refusal
from fmq.server.cluster.fencing import fencing_refusal, follower_refusal
from fmq.server.cluster.first_sight import check_again
from fmq.server.cluster.hosting import not_hosted
from fmq.server.context import RequestSession, ServerContext
from fmq.server.net import plain_sends
from fmq.server.net.reply_account import ReplyAccount
from fmq.server.net.request_admission import RequestAdmission
from fmq.server.ops.handlers import pull_after_wait, send_batch_reply, send_reply
from fmq.server.ops.operation import FmqOperation
from fmq.server.ops.placed import Reply
from fmq.server.ops.plain_pull import GatheredAnswers, PullWait, answer_pull_now, wait_then
from fmq.server.ops.table import OPERATIONS
from fmq.server.ops.tx_ops import TxSteps, pipelined, tx_steps
from fmq.tx.state import TxState

logger = logging.getLogger("fmq.server")

#: The requests the send pipeline ends (:meth:`SendBatcher.answer_directly`).
ANSWERED_BY_PIPELINE = frozenset((Op.SEND, Op.SEND_BATCH, Op.PREPARE, Op.COMMIT))

_SEND = int(Op.SEND)
#: A transaction step's answer framed by hand (:meth:`SessionRequests._answer_tx`): the
#: length prefix and header; the length counts the header.
_SEND_ANSWER_HEAD = struct.Struct(">IBBHQ")
_ANSWER_SIZE = HEADER_SIZE
_PREPARE = int(Op.PREPARE)
#: The requests the transaction step may take (:meth:`SessionRequests._start_plain_tx`).
_PLAIN_TX_OPS = frozenset((_PREPARE, int(Op.COMMIT)))
#: A str answer's length prefix (a PREPARE's ``tx_id``) and the longest such id.
_STR_LENGTH = struct.Struct(">H")
_MAX_TX_ID = 255
#: A COMMIT's answer payload per final state (None: committed by this request).
_STATE_PAYLOADS = {state: bytes(state_answer(state).payload) for state in TxState}
_STATE_PAYLOADS[None] = _STATE_PAYLOADS[TxState.COMMIT]
#: What a short step (:meth:`SessionRequests._start_plain_tx`, ``_start_plain_read``)
#: returns for a request it leaves to the general way (nothing of it done yet).
_DECLINED = object()
#: The session's plain sends: the compiled twin where it runs.
_PlainSends = native.choose(plain_sends).PlainSends
#: The reads' short step (:meth:`SessionRequests._start_plain_read`): a PULL answered at
#: once, a COMMIT_OFFSET without a task; a COMMIT_OFFSET's answer is its bare header.
_PULL = int(Op.PULL)
_COMMIT_OFFSET = int(Op.COMMIT_OFFSET)
_PLAIN_READ_OPS = frozenset((_PULL, _COMMIT_OFFSET))
_EMPTY_ANSWER_HEAD = struct.Struct(">IBBHQ")


class Connection(RequestSession, Protocol):
    """What the requests use of their session's connection."""

    ctx: ServerContext
    established: bool  # sent a complete request before
    eof: bool  # the peer sends no more: close once the running requests are answered
    admission: RequestAdmission
    replies: ReplyAccount

    def send(self, data: bytes, reserved: int = 0) -> None: ...

    def fail(self, opcode: int, request_id: int, exc: FMQError, why: str) -> None: ...

    def close(self) -> None: ...


class SessionRequests:
    """The requests a session runs: started from frames, answered as each ends."""

    #: Whether plain SENDs take the short step (False: every request the general way, the
    #: reference tests/server/test_plain_send_step.py compares the step with).
    plain_sends = True
    #: Whether PULL and COMMIT_OFFSET take theirs (False: the reference
    #: tests/server/test_plain_read_step.py compares it with).
    plain_reads = True
    #: Whether PREPARE and COMMIT take the short step too, where plain SENDs do and the
    #: transactions go through the send pipeline (False: the general way, the reference
    #: tests/server/test_plain_tx_step.py compares the step with).
    plain_tx = True

    def __init__(self, session: Connection) -> None:
        self.session = session
        self.ctx = session.ctx
        self.running: set[asyncio.Future] = set()
        self._held: dict[asyncio.Future, int] = {}  # request bytes per running request
        self._tx_steps: TxSteps | None = None  # the server's, once a step needs it
        #: The plain sends, taken from the frames and in flight without a future each
        #: (fmq.server.net.plain_sends).
        ctx = self.ctx
        self.plain = _PlainSends(self, ctx.counters, ctx.batcher, ctx.broker, ctx.limits,
                                 PLAIN_SEND, PLAIN_SEND_BATCH)
        self._drained: asyncio.Future | None = None  # see drained()

    def start_frames(self, frames: list[Frame]) -> None:
        """Start the request of each frame, in order, until the session closes; each holds
        its frame's request bytes until it ends (taken from the budget as the frame's
        length was read, :meth:`RequestAdmission.admit`)."""
        session = self.session
        admission = session.admission
        # What the short step asks of the session and the server, asked once for the run
        # (a frame of it cannot change them: a log-in or a role change ends in a later
        # turn; the first request makes the session established, the rest of its run
        # then takes the general way, which is never wrong).
        # The short steps' conditions stand for checks of _start that pass trivially for
        # any such request of the session: its first request is done, no users, no
        # cluster; and for SEND and SEND_BATCH (follower=REFUSES, follower_refusal) not a
        # follower and a send pipeline (a follower serves PULL; _start_commit_offset asks
        # for a COMMIT_OFFSET). Inline: asked at every read.
        ctx = self.ctx
        role = ctx.replication
        reads = (session.established and session.principal is None
                 and not ctx.authenticator.enforcing and ctx.routes is None)
        plain = (self.plain_sends and reads and ctx.batcher is not None
                 and (role is None or role.primary is None))
        plain_tx = plain and self.plain_tx  # and pipelined(ctx), asked at a PREPARE or COMMIT
        plain = plain and not ctx.stopping
        reads = self.plain_reads and reads
        # The PULLs of the run the step answers at once are written in one piece.
        gather = GatheredAnswers(session) if reads and len(frames) > 1 else None
        plain_sends = self.plain
        max_in_flight = ctx.config.max_in_flight
        received = 0
        at, count = 0, len(frames)
        try:
            while at < count:
                if plain:  # the plain sends from here on, in one call
                    at = plain_sends.take(frames, at, max_in_flight - len(self.running))
                    if at == count:
                        break
                frame = frames[at]  # one the step did not take: the general way's
                at += 1
                size = HEADER_SIZE + len(frame.payload)
                received += size
                request = None
                try:
                    op = frame.opcode
                    if plain_tx and op in _PLAIN_TX_OPS and pipelined(ctx):
                        request = self._start_plain_tx(frame)
                    elif reads and op in _PLAIN_READ_OPS:
                        request = self._start_plain_read(frame, gather)
                    else:
                        request = _DECLINED
                    if request is _DECLINED:
                        if gather is not None:  # written before it may answer or close
                            gather.flush()
                        request = self._start(frame)
                finally:
                    # The one place a frame's bytes go back when its request does not run
                    # (refused, malformed, or a bug): a refusal cannot forget them. (A plain
                    # send holds them in its entry of the send pipeline, given back as it
                    # is answered: fmq.server.net.plain_sends.)
                    if request is None:
                        admission.release(size)
                    else:
                        self._held[request] = size
                if session.closing:
                    break
        finally:
            # The frames' bytes are their requests' from now on: told once for the run
            # (nothing reads the count between two frames of it).
            admission.received(received)
        if gather is not None:
            gather.flush()

    def _start(self, frame: Frame) -> asyncio.Future | None:
        """The request's future, or None when it is refused (answered already)."""
        ctx, session = self.ctx, self.session
        op, rid = frame.opcode, frame.request_id
        if not session.established and not ctx.hooks.first_request(session):
            return None
        if frame.version != PROTOCOL_VERSION or frame.is_response:
            why = ("unsupported protocol version" if frame.version != PROTOCOL_VERSION
                   else "a response frame sent to the server")
            session.fail(op, rid, ProtocolError(
                f"{why} ({frame.version}); this server speaks version {PROTOCOL_VERSION} "
                f"requests, see docs/protocol.md"), "bad frame header")
            return None
        if rid == 0:
            # Id 0 marks connection-level errors: an answer carrying it would make the
            # client fail every request pending on this session, so treat it as one.
            session.fail(0, 0, ProtocolError(
                "request id 0 is reserved for connection-level errors; number requests from "
                "1 (docs/protocol.md section 1)"), "reserved request id")
            return None
        refusal = refusal_before_decoding(ctx, self.in_flight(), frame)
        if refusal is not None:
            session.send(encode_error(op, rid, refusal))
            return None
        try:
            req = decode_server_request(frame)  # messages as Message objects
        except ProtocolError as exc:
            session.fail(op, rid, exc, f"malformed {Op(op).name} payload")
            return None
        ctx.counters.requests += 1
        ctx.counters.by_op[op] += 1
        declared = OPERATIONS[op]
        refused = (access_refusal(ctx, session, declared, req) if ctx.authenticator.enforcing
                   else None)
        if refused is not None:
            ctx.counters.failed(op, refused)
            session.send(encode_error(op, rid, refused))
            return None
        routes = ctx.routes
        first = None  # a topic whose first write here waits for a read of the routes
        if routes is not None:  # a node of a cluster: is the queue this group's?
            made = routes.made_here(ctx)
            refused = not_hosted(routes.snapshot, routes.broker_group, declared.hosted, req, made)
            if refused is not None:
                # The client may know a newer route than this node's copy, or this primary
                # has not made the entry its topic yet.
                routes.poke(ctx if made is not None else None)
                ctx.counters.failed(op, refused)
                session.send(encode_error(op, rid, refused))
                return None
            first = (routes.first_sight.unseen(ctx, declared.hosted, req, made)
                     if made is not None else None)
        try:
            if first is not None:  # the routes are read first, then it runs
                request = routes.first_sight.hold(ctx, first, functools.partial(
                    self._run_checked, declared, req))
            else:
                # A coroutine becomes a task; SEND's handler returns a future and needs none.
                # (Not ensure_future: it finds the loop with a getpid system call, 3.11.)
                request = declared.handler(ctx, session, req)
                if asyncio.iscoroutine(request):
                    request = ctx.loop.create_task(request)
        except FMQError as exc:  # refused before it started (a send that cannot be stored)
            ctx.counters.failed(op, exc)
            session.send(encode_error(op, rid, exc))
            return None
        self.running.add(request)
        ctx.all_tasks.add(request)
        answer = functools.partial(self._answer, op, rid)
        if op in ANSWERED_BY_PIPELINE and ctx.batcher is not None:
            # Answered as the pipeline ends it, not a loop turn later from a done callback.
            ctx.batcher.answer_directly(request, answer)
        else:
            request.add_done_callback(answer)
        return request

    # ------------------------------------------------------------------ plain sends' owner

    def acknowledges(self) -> bool:
        """Whether a write may be answered as done now: SEND and SEND_BATCH are
        ``follower=REFUSES`` (:func:`fencing_refusal`), so not on a fenced primary."""
        role = self.ctx.replication
        return role is None or role.acknowledges()

    def plain_received(self, size: int) -> None:
        """Plain sends were taken from frames of ``size`` request bytes: they hold them."""
        self.session.admission.received(size)

    def plain_written(self, data: bytes, ended: int, size: int) -> None:
        """Plain sends' answers framed in one piece (:func:`answer_sends`), written;
        ``ended`` of them answered, their ``size`` request bytes given back. A bug here is
        logged and stops no other session's answers."""
        session = self.session
        try:
            if data:
                session.send(data)
            if size:
                session.admission.release(size)
            if ended:
                if session.eof and not self.running and not self.plain.count:
                    session.close()
                drained = self._drained
                if drained is not None and not self.plain.count:
                    self._drained = None
                    if not drained.done():
                        drained.set_result(None)
        except Exception:  # noqa: BLE001 - the other sessions still get theirs
            logger.exception("answering a connection's sends failed")

    def plain_failed(self, op: int, rid: int, exc: BaseException) -> None:
        """A plain send failed (its flush, or placement): its error answer, counted as
        :meth:`_answer` counts one."""
        try:
            self.ctx.counters.failed(op, exc)
            if not isinstance(exc, FMQError):
                logger.error("request %s failed unexpectedly", Op(op).name, exc_info=exc)
            self.session.send(encode_error(op, rid, exc))
        except Exception:  # noqa: BLE001 - the other requests still get theirs
            logger.exception("answering a request failed")

    def plain_results(self, op: int, rid: int, results: Sequence[SendResult]) -> None:
        """A plain send's answer through the codec (its results are not packed, or a
        fenced primary may have to refuse it), as :meth:`_answer` writes it."""
        exc = fencing_refusal(self.ctx.replication, op)
        if exc is None:
            try:
                reply = send_reply if op == _SEND else send_batch_reply
                data = encode_response(op, rid, reply(results))
            except Exception as enc:  # noqa: BLE001 - a bug must not kill the session
                exc = enc
        if exc is not None:
            self.plain_failed(op, rid, exc)
            return
        self.session.send(data)

    def in_flight(self) -> int:
        """Requests of this session running now (plain sends too)."""
        return len(self.running) + self.plain.count

    def drained(self) -> asyncio.Future | None:
        """A future that ends once no plain send of this session is in flight (a stopping
        server waits for them, as for its tasks), or None when none is."""
        if not self.plain.count:
            return None
        if self._drained is None:
            self._drained = self.ctx.loop.create_future()
        return self._drained

    def _start_plain_tx(self, frame: Frame) -> asyncio.Future | object | None:
        """A PREPARE or COMMIT of a session the step may serve (:meth:`start_frames`, and
        transactions on the send pipeline, :func:`~fmq.server.ops.tx_ops.pipelined`) started
        the short way, as the plain sends are started: its future, None when it
        is refused (answered already), or _DECLINED (nothing done) for :meth:`_start`. A
        PREPARE's messages must be plain (their own checks made as they are decoded,
        :func:`~fmq.protocol.message_requests.plain_prepare`); every other check is the
        writer's, as on the general way (:class:`~fmq.server.ops.tx_ops.TxSteps`)."""
        ctx = self.ctx
        op, rid = frame.opcode, frame.request_id
        if (frame.version != PROTOCOL_VERSION or frame.flags & FLAG_RESPONSE or rid == 0
                or self.in_flight() >= ctx.config.max_in_flight or ctx.stopping):
            return _DECLINED
        if op == _PREPARE:
            try:
                ctx.limits.check(frame)
            except FMQError:
                return _DECLINED
            fields = plain_prepare(frame.payload, ctx.broker.config.max_message_size)
            if fields is None:
                return _DECLINED
        else:
            fields = plain_commit(frame.payload)
            if fields is None:
                return _DECLINED
        counters = ctx.counters
        counters.requests += 1
        counters.by_op[op] += 1
        answered = functools.partial(self._answer_tx, op, rid)
        steps = self._tx_steps
        if steps is None:
            steps = self._tx_steps = tx_steps(ctx)
        try:
            if op == _PREPARE:
                group, tx_id, messages = fields
                request = steps.prepare(messages, group, tx_id, answered)
            else:
                request = steps.commit(fields[0], fields[1], answered)
        except FMQError as exc:  # refused before it started (the server stops)
            counters.failed(op, exc)
            self.session.send(encode_error(op, rid, exc))
            return None
        self.running.add(request)
        ctx.all_tasks.add(request)
        return request

    def _answer_tx(self, op: int, rid: int, request: asyncio.Future) -> None:
        """The answer of a PREPARE or COMMIT the short step started: its transaction id,
        or its final state, framed as they are (the codec's frame: a ``str`` field); or
        through :meth:`_answer` and the codec when the request failed, the id is not a
        name (the codec refuses it) or a fenced primary may have to refuse it (PREPARE
        and COMMIT are ``follower=REFUSES``, :func:`fencing_refusal`). It reserved no
        reply bytes."""
        role = self.ctx.replication
        payload = None
        if (not request.cancelled() and request.exception() is None
                and (role is None or role.acknowledges())):
            result = request.result()
            if op == _PREPARE:
                if type(result) is str:
                    data = result.encode()
                    if len(data) <= _MAX_TX_ID:
                        payload = _STR_LENGTH.pack(len(data)) + data
            else:
                payload = _STATE_PAYLOADS.get(result)
        if payload is None:
            self._answer(op, rid, request, tx_id_answer if op == _PREPARE else _state_reply)
            return
        self.running.discard(request)
        session = self.session
        session.send(_SEND_ANSWER_HEAD.pack(_ANSWER_SIZE + len(payload), PROTOCOL_VERSION, op,
                                            FLAG_RESPONSE, rid) + payload)
        # _done's, inline (nothing reserved for the reply here: nothing to settle).
        self.ctx.all_tasks.discard(request)
        session.admission.release(self._held.pop(request, 0))
        if session.eof and not self.running and not self.plain.count:
            session.close()

    def _start_plain_read(self, frame: Frame, gather: GatheredAnswers | None = None
                          ) -> asyncio.Future | object | None:
        """A PULL or COMMIT_OFFSET of a session the step may serve (:meth:`start_frames`)
        started the short way, as the plain sends are started: None when it was
        answered (a PULL answered at once, :func:`answer_pull_now`), the future of a PULL
        left to wait or of a COMMIT_OFFSET, or _DECLINED (nothing answered) for
        :meth:`_start` to run it. The conditions
        stand for :meth:`_start`'s checks as there; a payload the general decode refuses
        declines. ``gather``: where a PULL answered at once is written, with the others of
        its run of frames."""
        ctx = self.ctx
        op, rid = frame.opcode, frame.request_id
        if (frame.version != PROTOCOL_VERSION or frame.flags & FLAG_RESPONSE or rid == 0
                or self.in_flight() >= ctx.config.max_in_flight or ctx.stopping):
            return _DECLINED
        if op == _PULL:
            fields = plain_pull(frame.payload)
            if fields is None:
                return _DECLINED
            outcome = answer_pull_now(ctx, self.session if gather is None else gather, op,
                                      rid, fields)
            if outcome is True:
                return None
            if outcome is False:
                return _DECLINED
            return self._start_waiting_pull(op, rid, fields, outcome)
        return self._start_commit_offset(frame)

    def _start_waiting_pull(self, op: int, rid: int, fields: PullFields, wait: PullWait
                            ) -> asyncio.Future:
        """A PULL the step read and found nothing for, waiting with no task
        (:func:`wait_then`): a future stands for it among the running requests until it is
        answered (:meth:`_pull_woken`)."""
        ctx = self.ctx
        counters = ctx.counters
        counters.requests += 1
        counters.by_op[op] += 1
        request = ctx.loop.create_future()
        self.running.add(request)
        ctx.all_tasks.add(request)
        wait_then(ctx, wait, functools.partial(self._pull_woken, op, rid, fields, wait,
                                               request))
        return request

    def _pull_woken(self, op: int, rid: int, fields: PullFields, wait: PullWait,
                    request: asyncio.Future) -> None:
        """A waiting PULL woken (data, its deadline, its session closing, the server
        stopping): read and answered by the step again (:func:`answer_pull_now` to its
        deadline), or left to wait again, or, where the step declines (no reply room now,
        records for a reader thread), handed to the general way's task from that read."""
        ctx = self.ctx
        topic, queue_id, _offset, max_messages, wait_ms = fields
        fields = (topic, queue_id, wait.offset, max_messages, wait_ms)
        outcome = answer_pull_now(ctx, self.session, op, rid, fields, wait.deadline)
        if outcome is True:
            self._done(request)  # it reserved no reply bytes: settle gives back none
            request.set_result(None)
        elif outcome is False:
            task = ctx.loop.create_task(pull_after_wait(
                ctx, self.session, {"topic": topic, "queue_id": queue_id,
                                    "offset": wait.offset, "max_messages": max_messages,
                                    "wait_ms": wait_ms}, None, wait.deadline))
            # The task runs the request on: it holds the frame's bytes and its slot.
            self._held[task] = self._held.pop(request, 0)
            self.running.discard(request)
            self.running.add(task)
            ctx.all_tasks.add(task)
            ctx.all_tasks.discard(request)
            task.add_done_callback(functools.partial(self._answer, op, rid))
            task.add_done_callback(lambda _task: request.set_result(None))
        else:
            wait_then(ctx, outcome, functools.partial(self._pull_woken, op, rid, fields,
                                                      outcome, request))

    def _start_commit_offset(self, frame: Frame) -> asyncio.Future | object:
        """A COMMIT_OFFSET written as its handler writes it (``ctx.write`` of the offsets'
        commit, in a worker thread), without the task, the field dicts and the codec: its
        answer is framed when the write's future ends (:meth:`_answer_commit_offset`).
        _DECLINED on a follower (COMMIT_OFFSET is ``follower=REFUSES``) or for a payload
        the general decode refuses."""
        ctx = self.ctx
        role = ctx.replication
        fields = plain_commit_offset(frame.payload)
        if fields is None or role is not None and role.primary is not None:
            return _DECLINED
        group, topic, queue_id, next_offset = fields
        op = frame.opcode
        counters = ctx.counters
        counters.requests += 1
        counters.by_op[op] += 1
        # Progress of a group, not data: it wakes no pull (as the handler).
        request = ctx.write(ctx.broker.offsets.commit, group, [(topic, queue_id, next_offset)])
        self.running.add(request)
        ctx.all_tasks.add(request)
        request.add_done_callback(functools.partial(self._answer_commit_offset, op,
                                                    frame.request_id))
        return request

    def _answer_commit_offset(self, op: int, rid: int, request: asyncio.Future) -> None:
        """A COMMIT_OFFSET's answer: its header alone (the response has no fields), or
        :meth:`_answer`'s when the write failed or was cancelled, or a fenced primary may
        have to refuse it (:func:`fencing_refusal`). It reserved no reply bytes."""
        role = self.ctx.replication
        if (request.cancelled() or request.exception() is not None
                or role is not None and not role.acknowledges()):
            self._answer(op, rid, request, _no_fields)
            return
        self.running.discard(request)
        session = self.session
        session.send(_EMPTY_ANSWER_HEAD.pack(HEADER_SIZE, PROTOCOL_VERSION, op, FLAG_RESPONSE,
                                             rid))
        self.ctx.all_tasks.discard(request)
        session.admission.release(self._held.pop(request, 0))
        if session.eof and not self.running and not self.plain.count:
            session.close()

    def _run_checked(self, declared: FmqOperation, req: dict) -> Any:
        """A held first write, once the routes were read: checked again, then started."""
        check_again(self.ctx.routes, self.ctx, declared.hosted, req)
        return declared.handler(self.ctx, self.session, req)

    def _answer(self, op: int, rid: int, request: asyncio.Future, reply: Reply | None = None
                ) -> None:
        """Write ``request``'s answer (its result through ``reply`` when given: the short
        step's request whose answer is not framed as it is)."""
        # Free the in-flight slot before the answer leaves: the client may send its next
        # request the moment it reads this one.
        self.running.discard(request)
        # A request cancelled by a shutdown may have written already (its records placed,
        # waiting for the disk): its outcome is unknown, as after a lost connection.
        exc = request.exception() if not request.cancelled() else ConnectionLost(
            "the server stopped while the request ran; it may or may not have been applied "
            "(an idempotent producer's resend is safe)")
        exc = fencing_refusal(self.ctx.replication, op) if exc is None else exc
        if exc is None:
            try:
                result = request.result()
                data = encode_response(op, rid, reply(result) if reply is not None else result)
            except Exception as enc:  # noqa: BLE001 - a bug must not kill the session
                exc = enc
        if exc is not None:
            self.ctx.counters.failed(op, exc)
            if not isinstance(exc, FMQError):
                logger.error("request %s failed unexpectedly", Op(op).name, exc_info=exc)
            data = encode_error(op, rid, exc)
        session = self.session
        # What the socket did not take stays counted: the reservation becomes unsent bytes.
        session.send(data, session.replies.take_reservation(request))
        self._done(request)

    def _done(self, request: asyncio.Future) -> None:
        session = self.session
        self.running.discard(request)
        self.ctx.all_tasks.discard(request)
        session.admission.release(self._held.pop(request, 0))
        session.replies.settle(request)
        if session.eof and not self.running and not self.plain.count:
            session.close()


def _state_reply(state: TxState | None) -> Any:
    """A COMMIT's answer from the step's result (None: committed by this request)."""
    return state_answer(TxState.COMMIT if state is None else state)


def _no_fields(_result: object) -> dict:
    """The answer of a request whose response has no fields (COMMIT_OFFSET)."""
    return {}


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
    refused = follower_refusal(ctx.replication, op)
    if refused is not None:
        return refused
    if op not in OPERATIONS:
        # Framing is intact, so the session stays usable: newer clients can probe.
        return ProtocolError(
            f"unknown opcode {op}; this server knows {sorted(int(o) for o in SCHEMA)}")
    try:
        ctx.limits.check(frame)  # list limits, from the counts, before decoding
    except FMQError as exc:
        ctx.counters.requests += 1
        return exc
    return None
