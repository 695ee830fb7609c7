"""The background thread behind :meth:`fmq.client.Producer.send_async`.

Callers hand over encoded messages (:meth:`BatchSender.add`); one thread takes closed
batches from the :class:`~fmq.client.batching.BatchQueue` and writes each as one SEND_BATCH
on the producer's connection, keeping up to ``max_in_flight`` of them in flight (the
smaller of the client's setting and the server's, from PING). The connection's reader
thread completes them: every message's future gets its result, or the batch's error, once
the server answered, which it does only after the batch is durable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING

from fmq.errors import BrokerClosed, ConnectionLost, FMQError, NotHosted, PrimaryNotFound
from fmq.message import SendResult
from fmq.protocol import DEFAULT_MAX_FRAME, Op

from .acquire import OWN_LINK
from .batch_sending import BatchSending, submit_batch
from .batching import Batch, Limits, complete

if TYPE_CHECKING:
    from .base import Client
    from .connection import Connection



class BatchSender:
    """Batches of one threaded producer and the thread that sends them."""

    def __init__(self, client: Client, *, linger_s: float, batch_size: int,
                 max_batch_messages: int, buffer_memory: int, max_block_s: float,
                 idempotent: bool = False, dedup_window_messages: int | None = None,
                 link: str = OWN_LINK, broker_group: str = "",
                 reroute: Callable[[list[Future], NotHosted], None] | None = None,
                 unreachable: Callable[[], None] | None = None) -> None:
        """``link``: the broker group's link its batches go on; ``broker_group``: the group
        named in their results. ``reroute``: takes the messages of a batch the group refused
        with NotHosted (they are placed anew); ``unreachable``: told when no connection to
        the group's primary could be made."""
        self._client = client
        self._link = link
        self._broker_group = broker_group
        self._reroute = reroute
        self._unreachable = unreachable
        self._core = BatchSending(
            Limits(batch_size, max_batch_messages, DEFAULT_MAX_FRAME), linger_s,
            buffer_memory=buffer_memory, max_block_s=max_block_s,
            max_in_flight=client.max_in_flight,
            attempts=lambda started: client.attempts(started=started), idempotent=idempotent,
            dedup_window=dedup_window_messages)
        self._queue = self._core.queue
        # A plain lock: ``add`` takes it once per message (``with self._lock`` runs in C).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._limits_of: Connection | None = None  # the connection PING was asked on
        self._requests: dict[Batch, tuple[Connection, Future]] = {}  # batches in flight
        self._closing = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="fmq-batch-sender")
        self._thread.start()

    # ------------------------------------------------------------------ callers

    def add(self, part: bytes, handle: Future, sequence: int | None = None,
            renumbered: Callable[[], tuple[bytes, int]] | None = None) -> None:
        """Queue one encoded message (``sequence``: the number it carries, if any); blocks
        up to ``max_block_s`` while the buffer is full. A numbered message that had to
        wait is numbered again (``renumbered``: it encoded anew with the next number), so
        that messages queued meanwhile cannot leave its number far below theirs."""
        n = len(part)
        with self._lock:
            queue = self._queue
            if self._closing:
                raise BrokerClosed("this producer is closed; create a new one")
            if self._core.no_room_for(n):
                deadline = time.monotonic() + self._core.max_block_s
                while self._core.no_room_for(n):
                    rest = deadline - time.monotonic()
                    if rest <= 0 or self._closing:
                        raise self._core.buffer_full()
                    self._cond.wait(rest)
                if renumbered is not None:
                    part, sequence = renumbered()
            if queue.add(part, handle, time.monotonic(), sequence):
                self._cond.notify_all()

    def flush(self, timeout: float | None) -> None:
        """Wait until every message handed over before this call has its outcome."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            upto = self._queue.close_open()
            self._cond.notify_all()
            while self._queue.waiting_before(upto):
                rest = None if deadline is None else deadline - time.monotonic()
                if rest is not None and rest <= 0:
                    raise self._core.flush_timed_out(upto, timeout)
                self._cond.wait(rest)

    def close(self, timeout: float | None) -> None:
        """Flush (up to ``timeout``), then stop; messages still unsent fail with
        BrokerClosed."""
        try:
            self.flush(timeout)
        finally:
            with self._cond:
                self._closing = True
                left, closed = self._core.abandon()
                self._cond.notify_all()
            for batch in left:
                complete(batch, closed)
            self._thread.join(5)

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    overdue = self._queue.expired(now)
                    if overdue:
                        break
                    batch, wait = self._queue.next_batch(now, self._core.max_in_flight)
                    if batch is not None:
                        break
                    if self._closing and not self._queue.in_flight:
                        return
                    self._cond.wait(wait)
            if overdue:
                self._time_out(overdue)
            else:
                self._send(batch)

    def _time_out(self, overdue: list[Batch]) -> None:
        for batch in overdue:
            with self._cond:
                error = self._core.overdue(batch, self._client.request_timeout)
                entry = self._requests.get(batch)
            if entry is None:
                continue  # answered just now
            conn, fut = entry
            # The answer is dropped if it comes later; _answered fails the batch.
            conn.forget(fut, error)

    def _connection(self) -> Connection:
        conn = self._client._connection(self._link)
        if self._limits_of is not conn:
            ping = self._client.call(Op.PING, {}, retries=0, link=self._link)
            with self._cond:
                self._core.adopt_server_limits(ping)
            self._limits_of = conn
        return conn

    def _send(self, batch: Batch) -> None:
        try:
            conn = self._connection()
        except FMQError as exc:
            if self._unreachable is not None and isinstance(exc, (ConnectionLost,
                                                                  PrimaryNotFound)):
                self._unreachable()
            self._failed(batch, exc, written=False)
            return
        with self._cond:
            fitted, too_large = self._queue.fit(batch)
            if fitted is not None:
                self._queue.sending(fitted, float("inf"))  # counts in flight from now
        if too_large is not None:
            self._finish(too_large, self._core.too_large())
        if fitted is None:
            return
        fut = submit_batch(conn, fitted, self._failed)
        if fut is None:
            return
        with self._cond:
            if not fitted.done and fitted in self._queue.in_flight:
                self._requests[fitted] = (conn, fut)
                self._queue.sending(fitted, time.monotonic() + self._client.request_timeout)
        fut.add_done_callback(lambda f: self._answered(fitted, f))

    def _answered(self, batch: Batch, fut: Future) -> None:
        exc = fut.exception()
        with self._cond:
            self._requests.pop(batch, None)
        if exc is None:
            results = fut.result()
            if self._broker_group:
                results = [replace(r, group=self._broker_group) for r in results]
            self._finish(batch, results)
        else:
            self._failed(batch, exc, written=True)

    def _failed(self, batch: Batch, exc: BaseException, written: bool) -> None:
        if isinstance(exc, NotHosted) and self._reroute is not None:
            with self._cond:  # refused, nothing stored: its messages are placed anew
                if batch.done:
                    return
                self._queue.finished(batch)
                self._cond.notify_all()
            self._reroute(list(batch.handles), exc)
            return
        with self._cond:
            verdict = self._core.failed(batch, exc, written, self._closing, time.monotonic())
            if verdict is None:
                return
            failing, error = verdict
            if not failing:  # sent again
                self._cond.notify_all()
        for b in failing:
            self._finish(b, error)

    def _finish(self, batch: Batch, outcome: list[SendResult] | BaseException) -> None:
        # Outcomes first: once the batch counts as finished, flush() may return.
        complete(batch, outcome)
        with self._cond:
            self._queue.finished(batch)
            self._cond.notify_all()
