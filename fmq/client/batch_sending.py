"""The decisions of a batching producer, shared by the threaded sender
(:mod:`fmq.client.sender`) and the asyncio producer (:mod:`fmq.client.aio`): the server's
limits, when ``send_async`` must wait for buffer room, how a batch is fitted to a request,
what happens to a batch that failed or whose answer is overdue, and what closing fails.

No threads, no I/O and no locks: :class:`BatchSending` holds the
:class:`~fmq.client.batching.BatchQueue` and is driven under the sender thread's lock or on
the producer's event loop, which alone write requests, wait and complete handles.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fmq.errors import (
    BrokerClosed,
    DeliveryTimeout,
    FMQError,
    MessageTooLarge,
    RequestTimeout,
)
from fmq.protocol import Op
from fmq.protocol.batch import decode_send_results, send_batch_frame

from .batching import (
    Batch,
    BatchQueue,
    BufferFull,
    Limits,
    resend_is_safe,
    too_large_error,
    unreachable,
)
from .deadline import Attempts

logger = logging.getLogger("fmq.client")


def submit_batch(conn: Any, batch: Batch,
                 unwritten: Callable[[Batch, BaseException, bool], None]) -> Any | None:
    """Write ``batch`` as one SEND_BATCH on ``conn`` (a threaded or an asyncio
    connection); its future resolves to the SendResults. None when nothing could be
    written: then ``unwritten(batch, error, False)`` was called."""
    parts, size = batch.parts, batch.size
    try:
        return conn.submit_encoded(Op.SEND_BATCH,
                                   lambda rid: send_batch_frame(rid, parts, size),
                                   decode_send_results)
    except FMQError as exc:
        unwritten(batch, exc, False)
        return None


class BatchSending:
    """One producer's batches and the rules for sending them. ``max_in_flight``: the
    client's setting until :meth:`adopt_server_limits` takes the server's into account;
    ``attempts(started)``: the retry budget of a batch opened at ``started`` (the client's
    ``delivery_timeout`` and ``retries``, :mod:`fmq.client.deadline`), which says how often
    and how late a failed batch that may be sent again is; ``dedup_window``: how far apart
    the sequence numbers of unanswered messages may be (the server's
    ``dedup_window_messages``; :class:`~fmq.client.batching.BatchQueue`)."""

    def __init__(self, limits: Limits, linger_s: float, *, buffer_memory: int,
                 max_block_s: float, max_in_flight: int,
                 attempts: Callable[[float], Attempts], idempotent: bool,
                 dedup_window: int | None = None) -> None:
        self.queue = BatchQueue(limits, linger_s, dedup_window)
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_s
        self.client_max_in_flight = max_in_flight
        #: Batches kept in flight at once: the smaller of the client's and server's limit.
        self.max_in_flight = max_in_flight
        self.attempts = attempts
        self.idempotent = idempotent  # a written batch may be sent again

    def adopt_server_limits(self, ping: dict[str, Any]) -> None:
        """Take the server's limits from its PING answer (on every new connection)."""
        self.max_in_flight = max(1, min(self.client_max_in_flight, ping["max_in_flight"]))
        q = self.queue
        q.limits = Limits(q.limits.batch_size, q.limits.max_messages, ping["max_frame_size"])

    def no_room_for(self, n: int) -> bool:
        """Whether a message of ``n`` encoded bytes must wait for room in the buffer (a
        message larger than the whole buffer goes in when the buffer is empty)."""
        buffered = self.queue.buffered
        return bool(buffered) and buffered + n > self.buffer_memory

    def buffer_full(self) -> BufferFull:
        return BufferFull(
            f"the producer's buffer of {self.buffer_memory} bytes stayed full for "
            f"{self.max_block_s}s: the server does not keep up; slow down, flush(), or "
            f"raise buffer_memory or max_block_s")

    def flush_timed_out(self, upto: int, timeout: float | None) -> RequestTimeout:
        return RequestTimeout(f"flush: {self.queue.waiting_before(upto)} messages still "
                              f"wait for the server after {timeout}s")

    def too_large(self) -> MessageTooLarge:
        """What the messages too large for any request (:meth:`BatchQueue.fit`) fail with."""
        return too_large_error(self.queue.limits)

    def overdue(self, batch: Batch, request_timeout: float) -> RequestTimeout:
        """``batch``'s answer did not come in time: it is no longer overdue (not twice),
        and the error its request is failed with, which fails the batch."""
        self.queue.sending(batch, float("inf"))
        return RequestTimeout(
            f"no answer to a SEND_BATCH of {len(batch.handles)} messages within "
            f"{request_timeout:.1f}s; they may or may not be stored")

    def failed(self, batch: Batch, error: BaseException, written: bool, closing: bool,
               now: float) -> tuple[list[Batch], BaseException] | None:
        """``batch`` failed with ``error`` (``written``: after its request was written).
        None when it already had its outcome; ([], error) when it goes out again (after a
        back-off, before any later batch); else the batches that fail and the error they
        fail with (``error``, or DeliveryTimeout naming it once the batch's delivery
        deadline is reached): the batch, and every batch still waiting when no connection
        could be made at all. The caller completes those, then marks each
        :meth:`BatchQueue.finished`."""
        if batch.done:
            return None
        if resend_is_safe(error, written, self.idempotent) and not closing:
            budget = self.attempts(batch.created)
            budget.attempt = batch.attempts
            try:
                delay = budget.pause(error, now=now)
            except FMQError as final:
                error = final
            else:
                logger.debug("batch of %d messages failed (%s); sending it again in %.2fs",
                             len(batch.handles), error, delay)
                self.queue.send_again(batch, now + delay)
                return [], error
        cause = error.last_error if isinstance(error, DeliveryTimeout) else error
        waiting = self.queue.take_all() if unreachable(cause, written) else []
        return [batch, *waiting], error

    def abandon(self) -> tuple[list[Batch], BrokerClosed]:
        """Closing: every batch not yet sent, already marked finished, and the error the
        caller fails them with."""
        left = self.queue.take_all()
        for batch in left:
            self.queue.finished(batch)
        return left, BrokerClosed("the producer was closed before this message was sent; "
                                  "nothing of it was stored")
