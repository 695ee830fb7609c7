"""Client-side batching shared by the threaded and the asyncio producer: the batches, the
order they are sent in, what is resent, and the buffer's byte count.

No threads, no I/O and no locks here: :class:`BatchQueue` is a plain state machine that the
thread of :mod:`fmq.client.sender` drives under its lock and the asyncio producer drives on
its event loop. A message is encoded once when it is handed over
(:func:`fmq.protocol.batch.encode_message`) and stays those bytes until its batch is
answered; each message has a *handle* (a future of either kind) that gets its
:class:`~fmq.message.SendResult` or its error.

Order: batches are sent in the order they were closed, and a batch waiting to be resent
holds back every later batch until it has been sent again. An idempotent producer's batch
also waits while sending it would put the sequence numbers of the messages without an
outcome (in flight, or waiting to be resent) ``window`` or more apart: the server's dedup
window judges a resend only within its last ``dedup_window_messages`` sequences, so a
batch resent after later ones were stored must still lie inside it. With one batch in flight
(``max_in_flight=1``) this keeps the order of each queue's messages; with more in flight a
resent batch can land behind a later one (as in Kafka without idempotence). An idempotent
producer's resent batch is never stored twice: the server answers the messages it already
stored with their original results.
"""

from __future__ import annotations

import asyncio
from collections import deque
from concurrent.futures import InvalidStateError
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from fmq.errors import (
    ConnectionLost,
    FMQError,
    MessageTooLarge,
    PrimaryNotFound,
    ProtocolError,
    RequestTimeout,
)
from fmq.message import SendResult
from fmq.protocol.batch import BATCH_FRAME_OVERHEAD

from .deadline import may_be_stored


class BufferFull(RequestTimeout):
    """``send_async`` waited ``max_block_s`` for room in the producer's buffer."""


class Batch:
    """Messages that travel in one SEND_BATCH request."""

    __slots__ = ("attempts", "created", "done", "handles", "high", "low", "parts", "seq",
                 "size")

    def __init__(self, created: float, seq: int = 0) -> None:
        self.parts: list[bytes] = []
        self.handles: list[Any] = []
        self.size = 0  # encoded bytes of parts
        self.created = created
        self.seq = seq  # order of creation; the pieces of a cut batch keep its number
        self.attempts = 0  # times it was sent again after a failure that stored nothing
        self.done = False  # every handle has its outcome
        #: The lowest and highest sequence number of its messages (None: none numbered).
        self.low: int | None = None
        self.high: int | None = None

    def add(self, part: bytes, handle: Any, sequence: int | None = None) -> None:
        self.parts.append(part)
        self.handles.append(handle)
        self.size += len(part)
        if sequence is not None:
            self.numbered(sequence, sequence)

    def numbered(self, low: int, high: int) -> None:
        """Its messages' sequence numbers reach from ``low`` to ``high`` (or further)."""
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)


@dataclass(frozen=True)
class Limits:
    """What one request may carry: the client's batch size and message count and the
    server's frame size (from PING)."""

    batch_size: int
    max_messages: int
    max_frame: int

    @property
    def max_request_bytes(self) -> int:
        return self.max_frame - BATCH_FRAME_OVERHEAD


def split_to_fit(batch: Batch, limits: Limits) -> tuple[list[Batch], Batch]:
    """``batch`` cut into batches that fit one request frame and ``max_messages``, in
    order, plus a batch of the messages too large for any frame (perhaps empty)."""
    out: list[Batch] = []
    too_large = Batch(batch.created, batch.seq)
    current = Batch(batch.created, batch.seq)
    limit = limits.max_request_bytes
    for part, handle in zip(batch.parts, batch.handles, strict=True):
        if len(part) > limit:
            too_large.add(part, handle)
            continue
        if current.parts and (current.size + len(part) > limit
                              or len(current.parts) >= limits.max_messages):
            out.append(current)
            current = Batch(batch.created, batch.seq)
        current.add(part, handle)
    if current.parts:
        out.append(current)
    for piece in [*out, too_large]:
        piece.attempts = batch.attempts
        if batch.low is not None:  # each piece may hold any of them: the whole range
            piece.numbered(batch.low, batch.high)
    return out, too_large


def too_large_error(limits: Limits) -> MessageTooLarge:
    return MessageTooLarge(
        f"the message takes more than {limits.max_request_bytes} encoded bytes and does not "
        f"fit the server's max_frame_size of {limits.max_frame} bytes; send a smaller body "
        f"or raise the limit")


def complete(batch: Batch, outcome: list[SendResult] | BaseException) -> None:
    """Give every handle of ``batch`` its result, or the batch's error. A handle its
    owner cancelled is skipped (the message is sent all the same)."""
    if isinstance(outcome, BaseException):
        for handle in batch.handles:
            if not handle.done():
                with suppress(InvalidStateError, asyncio.InvalidStateError):
                    handle.set_exception(outcome)
        return
    if len(outcome) != len(batch.handles):
        complete(batch, ProtocolError(f"the server answered {len(outcome)} results for a "
                                      f"batch of {len(batch.handles)} messages"))
        return
    try:
        for handle, result in zip(batch.handles, outcome, strict=True):
            handle.set_result(result)
    except (InvalidStateError, asyncio.InvalidStateError):  # cancelled: rare, go slowly
        for handle, result in zip(batch.handles, outcome, strict=True):
            if not handle.done():
                with suppress(InvalidStateError, asyncio.InvalidStateError):
                    handle.set_result(result)


def resend_is_safe(error: BaseException, written: bool, idempotent: bool = False) -> bool:
    """True when sending the batch again cannot store a message twice: ``error`` says the
    batch was not stored (a retriable refusal such as ServerBusy or IndexUnavailable, or a
    lost connection before the request was written), or the producer is ``idempotent``
    (the server answers a resend of a stored message with its original result). Without
    idempotence a connection lost or a time-out after the request was written, or a
    NotEnoughReplicas or LeadershipLost refusal (its records are in the primary's log all
    the same), may have stored it (:func:`~fmq.client.deadline.may_be_stored`): that batch
    fails instead."""
    if not isinstance(error, FMQError) or not error.retriable:
        return False
    return idempotent or not written or not may_be_stored(error)


def unreachable(error: BaseException, written: bool) -> bool:
    """True when a batch that was never written failed for good because no connection
    could be made (to the primary): then every batch still waiting fails with it too, at once, instead of
    each trying its own round of reconnects (which would keep ``flush`` waiting for as
    long as the server is down)."""
    return not written and isinstance(error, (ConnectionLost, PrimaryNotFound))


class BatchQueue:
    """The batches of one producer: the open one, those closed and waiting, those to send
    again, those in flight, and the bytes they hold (for ``buffer_memory``)."""

    def __init__(self, limits: Limits, linger_s: float, window: int | None = None) -> None:
        self.limits = limits
        self.linger_s = linger_s
        #: How far apart the sequence numbers of unanswered messages may be (None: any).
        self.window = window
        self.open: Batch | None = None
        self.ready: deque[Batch] = deque()
        self.resend: deque[tuple[float, Batch]] = deque()  # (not before, batch), in order
        self.in_flight: dict[Batch, float] = {}  # batch -> answer deadline
        self.unfinished: set[Batch] = set()  # every batch whose handles are not all done
        self.buffered = 0  # encoded bytes of unfinished messages
        self.next_seq = 0  # the number of the next batch opened

    def add(self, part: bytes, handle: Any, now: float, sequence: int | None = None) -> bool:
        """Queue one encoded message; True when a sender should look again (a batch was
        closed, or this one opened a batch whose linger starts now)."""
        limits = self.limits
        batch = self.open
        woke = False
        if batch is not None and (batch.size + len(part) > limits.batch_size
                                  or len(batch.parts) >= limits.max_messages):
            self.ready.append(batch)
            batch = None
            woke = True
        if batch is None:
            batch = self.open = Batch(now, self.next_seq)
            self.next_seq += 1
            self.unfinished.add(batch)
            woke = True
        batch.add(part, handle, sequence)
        self.buffered += len(part)
        if batch.size >= limits.batch_size or len(batch.parts) >= limits.max_messages:
            self.ready.append(batch)
            self.open = None
            woke = True
        return woke

    def close_open(self) -> int:
        """Close the open batch now (flush: nobody waits for its linger); returns the
        number every batch opened so far is below (see :meth:`waiting_before`)."""
        if self.open is not None:
            self.ready.append(self.open)
            self.open = None
        return self.next_seq

    def waiting_before(self, seq: int) -> int:
        """Messages without an outcome yet in batches opened before number ``seq``."""
        return sum(len(b.handles) for b in self.unfinished if b.seq < seq)

    def next_batch(self, now: float, max_in_flight: int) -> tuple[Batch | None, float | None]:
        """The batch to send now, or None and how long to wait at most before asking
        again (None: until woken)."""
        waits: list[float] = []
        if self.in_flight:
            waits.append(max(0.0, min(self.in_flight.values()) - now))
        if len(self.in_flight) >= max_in_flight:
            return None, min(waits) if waits else None
        if self.resend:
            due, batch = self.resend[0]
            if due <= now:
                self.resend.popleft()
                return batch, None
            waits.append(due - now)  # later batches wait for it: order
            return None, min(waits)
        if self.ready:
            if self._beyond_window(self.ready[0]):
                return None, min(waits) if waits else None
            return self.ready.popleft(), None
        if self.open is not None:
            due = self.open.created + self.linger_s
            if due <= now:
                if self._beyond_window(self.open):
                    return None, min(waits) if waits else None
                batch, self.open = self.open, None
                return batch, None
            waits.append(due - now)
        return None, min(waits) if waits else None

    def _beyond_window(self, batch: Batch) -> bool:
        """Whether sending ``batch`` now would spread the unanswered sequence numbers over
        ``window`` or more (it then waits for answers: every batch in flight has one by
        its deadline)."""
        if self.window is None or batch.high is None or not self.in_flight:
            return False
        lows = [b.low for b in self.in_flight if b.low is not None]
        return bool(lows) and batch.high - min(lows) >= self.window

    def fit(self, batch: Batch) -> tuple[Batch | None, Batch | None]:
        """``batch`` as it may be sent under the current limits: when it is too large for
        one frame or has too many messages, its first piece (the others go first in the
        ready queue, in order); and a batch of the messages too large for any frame, which
        the caller fails with :func:`too_large_error` and then marks finished."""
        limits = self.limits
        if batch.size <= limits.max_request_bytes and len(batch.parts) <= limits.max_messages:
            return batch, None
        pieces, too_large = split_to_fit(batch, limits)
        self.unfinished.discard(batch)
        batch.done = True
        self.unfinished.update(pieces)
        self.ready.extendleft(reversed(pieces[1:]))
        if not too_large.parts:
            return (pieces[0] if pieces else None), None
        self.unfinished.add(too_large)
        return (pieces[0] if pieces else None), too_large

    def sending(self, batch: Batch, deadline: float) -> None:
        self.in_flight[batch] = deadline

    def expired(self, now: float) -> list[Batch]:
        """Batches in flight whose answer is overdue."""
        return [b for b, deadline in self.in_flight.items() if deadline <= now]

    def send_again(self, batch: Batch, not_before: float) -> None:
        """A failure stored nothing: the batch goes out again before any later one."""
        self.in_flight.pop(batch, None)
        batch.attempts += 1
        self.resend.append((not_before, batch))

    def finished(self, batch: Batch) -> None:
        """Every handle of ``batch`` has its outcome (or is about to get it)."""
        self.in_flight.pop(batch, None)
        if batch in self.unfinished:
            self.unfinished.discard(batch)
            self.buffered -= batch.size
        batch.done = True

    def take_all(self) -> list[Batch]:
        """Every batch not yet sent (closing without sending them)."""
        out = [b for _due, b in self.resend] + list(self.ready)
        if self.open is not None:
            out.append(self.open)
        self.resend.clear()
        self.ready.clear()
        self.open = None
        return out

    @property
    def idle(self) -> bool:
        return not self.unfinished
