"""One session's plain SENDs and SEND_BATCHes in flight, and the answers of a flush's sends
framed in one call (issue 41, item 1).

A plain send (the session's short step, :mod:`fmq.server.net.session_requests`) is queued
in the send pipeline by :meth:`PlainSends.take`, a run of a read's frames in one call (the
decode, the checks, the queueing, the counting), without an asyncio future, a done
callback or a set entry of its own:
its entry in the turn's sends is ``(messages, None, plain, request_id, opcode, size)``,
``plain`` the session's :class:`PlainSends`, ``size`` the request bytes it holds. When the
flush covering it is durable, :func:`answer_sends` answers a placed batch in one pass:
a plain send's answer (its header and its packed results, as the wire's ``send_result``
layout has them) is framed into its session's answer bytes, and each session that got
some is told once, after the pass (:meth:`PlainOwner.plain_written`): its answers written
in one piece, its request bytes given back, its count of sends in flight lowered. A send
that failed, or whose results are not packed, or that a fenced primary may not acknowledge
(asked once per pass: the role is the server's), is answered one by one through its
owner, which frames it with the codec and counts the error as the general way does.

Any other request of the batch (the general way's: a future, a reply, who answers it) is
answered by ``general(item, results, failure)`` where it comes, after what the pass framed
for every session so far was written: a connection's answers leave in request order.

This module is the reference, run on the pure path; its compiled twin
``fmq.server.net._plain_sends_c`` (``_plain_sends_c.pyx``) frames the answers in C, into a
buffer per session. tests/native/test_plain_answer_twins.py compares what the two write,
byte for byte, and what they tell each owner.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from fmq.errors import FMQError
from fmq.message import PackedResults
from fmq.protocol.framing import FLAG_RESPONSE, HEADER_SIZE, PROTOCOL_VERSION
from fmq.protocol.schema import Op

_SEND = int(Op.SEND)  # a SEND's answer is its one result, a SEND_BATCH's has a count
_SEND_BATCH = int(Op.SEND_BATCH)
_RESULT_SIZE = PackedResults.FORMAT.size
#: The length prefix and header of an answer, a SEND_BATCH's with its results' count; the
#: lengths count the header.
_SEND_HEAD = struct.Struct(">IBBHQ")
_BATCH_HEAD = struct.Struct(">IBBHQI")
_part = PackedResults.part


class PlainOwner(Protocol):
    """What a session's plain sends ask of it as they are answered (the session's
    requests, :class:`fmq.server.net.session_requests.SessionRequests`)."""

    def acknowledges(self) -> bool:
        """Whether a write may be answered as done now (not a fenced primary)."""

    def plain_received(self, size: int) -> None:
        """Frames of ``size`` request bytes were taken: their sends hold them now."""

    def plain_written(self, data: bytes, ended: int, size: int) -> None:
        """Write ``data`` (answers framed here, maybe none); ``ended`` plain sends were
        answered since the last call, holding ``size`` request bytes, given back now."""

    def plain_failed(self, op: int, rid: int, exc: BaseException) -> None:
        """Answer the plain send ``rid`` with the error ``exc``."""

    def plain_results(self, op: int, rid: int, results: Sequence[Any]) -> None:
        """Answer the plain send ``rid`` with ``results`` through the codec."""


class PlainSends:
    """One session's plain sends: queued from its frames (:meth:`take`), counted while in
    flight (``count``) and, while :func:`answer_sends` runs, the answers framed for it and
    not written yet.

    What :meth:`take` uses is given once: ``counters`` (the server's
    :class:`~fmq.server.context.ServerCounters`), ``batcher`` (its
    :class:`~fmq.server.ops.batcher.SendBatcher`: ``plain_queue()`` and
    ``max_batch_messages``), ``broker`` (``check_plain_message``, ``check_messages`` and
    ``config.max_message_size``), ``limits`` (the list limits:
    :class:`~fmq.server.net.request_limits.RequestLimits`) and the plain decodes
    (``decode_send``, ``decode_batch``: :data:`~fmq.protocol.message_requests.PLAIN_SEND`,
    ``PLAIN_SEND_BATCH``)."""

    __slots__ = ("owner", "count", "_answers", "_ended", "_size", "_open", "_counters",
                 "_batcher", "_check_one", "_check_many", "_check_limits", "_max_size",
                 "_decode_send", "_decode_batch")

    def __init__(self, owner: PlainOwner, counters: Any, batcher: Any, broker: Any,
                 limits: Any, decode_send: Callable[[Any, int], Any],
                 decode_batch: Callable[[Any, int], Any]) -> None:
        self.owner = owner
        #: Plain sends queued and not answered yet (they count against max_in_flight).
        self.count = 0
        self._answers = bytearray()
        self._ended = 0
        self._size = 0
        self._open = False  # touched by the running pass
        self._counters = counters
        self._batcher = batcher
        self._check_one = broker.check_plain_message
        self._check_many = broker.check_messages
        self._check_limits = limits.check
        self._max_size = broker.config.max_message_size
        self._decode_send = decode_send
        self._decode_batch = decode_batch

    def take(self, frames: Sequence[Any], at: int, room: int) -> int:
        """Queue the plain SENDs and SEND_BATCHes of ``frames`` from ``at`` on in the send
        pipeline (:meth:`SendBatcher.plain_queue`), while fewer than ``room`` are in flight;
        the index of the first frame not taken. One is not taken (it and what follows are
        left to the caller, the general way, which makes every check again and gives each
        error) when it is another request, its header is not a plain request's (version,
        a response's flag, request id 0), its payload is not plain (the decodes), it is
        over a list limit or ``max_batch_messages``, its topic refuses it (the broker's
        checks), or the pipeline stops. Each one taken holds its frame's request bytes
        from now on (:meth:`PlainOwner.plain_received`) and is counted as a request."""
        count = len(frames)
        queue = None
        sends = batches = received = 0
        max_size = self._max_size
        try:
            while at < count and self.count < room:
                frame = frames[at]
                op = frame.opcode
                if op != _SEND and op != _SEND_BATCH:
                    break
                rid = frame.request_id
                if frame.version != PROTOCOL_VERSION or frame.flags & FLAG_RESPONSE or rid == 0:
                    break
                payload = frame.payload
                try:
                    if op == _SEND:
                        message = self._decode_send(payload, max_size)
                        if message is None:
                            break
                        self._check_one(message)
                        msgs = [message]
                    else:
                        self._check_limits(frame)
                        msgs = self._decode_batch(payload, max_size)
                        if msgs is None or len(msgs) > self._batcher.max_batch_messages:
                            break
                        self._check_many(msgs)
                    if queue is None:
                        queue = self._batcher.plain_queue()
                except FMQError:
                    break
                size = HEADER_SIZE + len(payload)
                queue.append((msgs, None, self, rid, op, size))
                self.count += 1
                received += size
                if op == _SEND:
                    sends += 1
                else:
                    batches += 1
                at += 1
        finally:
            if received:
                counters = self._counters
                counters.requests += sends + batches
                counters.by_op[_SEND] += sends
                counters.by_op[_SEND_BATCH] += batches
                self.owner.plain_received(received)
        return at

    def _frame(self, op: int, rid: int, results: bytes, n: int) -> None:
        if op == _SEND:
            self._answers += _SEND_HEAD.pack(HEADER_SIZE + len(results), PROTOCOL_VERSION, op,
                                             FLAG_RESPONSE, rid)
        else:
            self._answers += _BATCH_HEAD.pack(HEADER_SIZE + 4 + len(results), PROTOCOL_VERSION,
                                              op, FLAG_RESPONSE, rid, n)
        self._answers += results

    def _flush(self) -> None:
        """Write what was framed so far (an answer written another way comes next)."""
        if self._answers:
            data = bytes(self._answers)
            self._answers.clear()
            self.owner.plain_written(data, 0, 0)

    def _settle(self) -> None:
        """The pass ended: the answers written, the sends counted out, their bytes back."""
        self._open = False
        data = bytes(self._answers)
        self._answers.clear()
        ended, size = self._ended, self._size
        self._ended = self._size = 0
        self.count -= ended
        self.owner.plain_written(data, ended, size)


#: Answers a request of the general way: ``general(item, its results or None, failure)``.
General = Callable[[tuple, Any, BaseException | None], None]


def answer_sends(requests: Sequence[tuple], results: Sequence[Any],
                 failure: BaseException | None, general: General) -> None:
    """Answer a placed batch of sends: each gets its results (``results``, every request's
    in order, packed or a list) or ``failure``. Plain sends are framed into their
    sessions' answers, the others answered by ``general`` (see the module's docstring)."""
    packed = results.data if type(results) is PackedResults else None
    touched: list[PlainSends] = []
    acknowledged = True
    pos = 0
    try:
        for item in requests:
            n = len(item[0])
            if item[1] is not None:  # the general way's request
                for plain in touched:
                    plain._flush()
                if failure is not None:
                    general(item, None, failure)
                    continue
                general(item, results[pos:pos + n] if packed is None
                        else _part(packed, pos, n), None)
                pos += n
                continue
            plain = item[2]
            if not plain._open:
                plain._open = True
                if not touched:  # the role is the server's: asked once per pass
                    acknowledged = plain.owner.acknowledges()
                touched.append(plain)
            rid, op = item[3], item[4]
            plain._ended += 1
            plain._size += item[5]
            if failure is not None:
                plain._flush()
                plain.owner.plain_failed(op, rid, failure)
                continue
            if packed is not None and acknowledged:
                if (pos + n) * _RESULT_SIZE > len(packed):
                    raise IndexError("answer_sends: fewer packed results than messages")
                plain._frame(op, rid, packed[pos * _RESULT_SIZE:(pos + n) * _RESULT_SIZE], n)
            else:
                plain._flush()
                plain.owner.plain_results(op, rid, results[pos:pos + n] if packed is None
                                          else _part(packed, pos, n))
            pos += n
    finally:
        for plain in touched:
            plain._settle()
