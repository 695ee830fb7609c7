"""The asyncio producer: ``await producer.send(...)``, ``await producer.send_batch(...)``
and client-side batching with ``await producer.send_async(...)``.

The same protocol code as the threaded client (frames, the schema, the SEND_BATCH codec of
:mod:`fmq.protocol.batch`) and the same batching rules (:mod:`fmq.client.batching`: what
goes in a batch, the order batches go out, what is sent again): only the I/O is asyncio.
Use one :class:`AsyncProducer` from one event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from fmq.errors import BrokerClosed, FMQError, InvalidArgument
from fmq.message import Message, ScheduledSend, SendResult
from fmq.protocol import DEFAULT_MAX_FRAME, Op
from fmq.protocol.values import (
    message_to_wire,
    result_from_wire,
    schedule_to_wire,
    scheduled_from_wire,
)

from .acquire import DEFAULT_GROUP, LinkPool, PooledClient
from .aio_connection import AsyncConnection, find_node
from .batch_sending import BatchSending, submit_batch
from .batching import Batch, Limits, complete
from .connection import parse_servers
from .deadline import DEFAULT_DELIVERY_TIMEOUT
from .discovery import PRIMARY, Finder
from .idempotence import Sequencer
from .tls import TLSSetting


class AsyncProducer(PooledClient):
    """Sends messages to an FMQ server from asyncio code. The options mean what they mean
    for :class:`fmq.client.Producer` (idempotent by default, so a send that timed out or
    lost its connection is sent again safely, within ``delivery_timeout``); ``send_async`` waits (up to
    ``max_block_s``) for room in the buffer, then returns an asyncio future of the
    message's SendResult. Given several servers, it sends to the primary among them
    (docs/client.md)."""

    def __init__(self, servers: str | Sequence[str], *, request_timeout: float = 10.0,
                 connect_timeout: float = 5.0, retries: int | None = None,
                 delivery_timeout: float | None = DEFAULT_DELIVERY_TIMEOUT,
                 backoff_initial: float = 0.05, backoff_max: float = 2.0,
                 max_in_flight: int = 128, linger_ms: float = 5, batch_size: int = 64 * 1024,
                 max_batch_messages: int = 10_000, buffer_memory: int = 32 * 1024 * 1024,
                 max_block_s: float = 60.0, idempotent: bool = True,
                 producer_id: str | None = None, dedup_window_messages: int = 10_000,
                 tls: TLSSetting = None,
                 user: str | None = None, password: str | None = None,
                 password_file: str | None = None) -> None:
        if (batch_size < 1 or max_batch_messages < 1 or buffer_memory < 1 or linger_ms < 0
                or dedup_window_messages < 1):
            raise InvalidArgument("batch_size, max_batch_messages, buffer_memory and "
                                  "dedup_window_messages must be positive and linger_ms at "
                                  "least 0")
        self.servers = parse_servers(servers)
        self._sequencer = Sequencer(idempotent, producer_id)
        self.idempotent = idempotent
        self.producer_id = self._sequencer.producer_id
        self._connect_options(tls=tls, user=user, password=password, password_file=password_file,
                              request_timeout=request_timeout, connect_timeout=connect_timeout,
                              retries=retries, delivery_timeout=delivery_timeout,
                              backoff_initial=backoff_initial,
                              backoff_max=backoff_max, max_in_flight=max_in_flight)
        self._core = BatchSending(
            Limits(batch_size, max_batch_messages, DEFAULT_MAX_FRAME), linger_ms / 1000,
            buffer_memory=buffer_memory, max_block_s=max_block_s, max_in_flight=max_in_flight,
            attempts=lambda started: self.attempts(started=started), idempotent=idempotent,
            dedup_window=dedup_window_messages)
        self._queue = self._core.queue
        self._conn_lock: asyncio.Lock | None = None
        #: This producer's connection (one broker group: :data:`DEFAULT_GROUP`).
        self.links = LinkPool.single(Finder(self.servers, PRIMARY))
        self._closed = False
        self._requests: dict[Batch, tuple[AsyncConnection, asyncio.Future]] = {}
        self._wake = asyncio.Event()  # the sender should look again
        self._progress = asyncio.Event()  # a batch finished: buffer room, flush
        self._sender: asyncio.Task | None = None

    # ------------------------------------------------------------------ requests

    async def _connection(self, group: str = DEFAULT_GROUP) -> AsyncConnection:
        link = self.links[group]
        conn = link.usable()
        if conn is not None:
            return conn
        if self._conn_lock is None:
            self._conn_lock = asyncio.Lock()
        async with self._conn_lock:
            conn, stale = link.claim(self._closed, "producer")
            if conn is not None:
                return conn
            if stale is not None:
                await stale.close()
            conn, ping = await find_node(
                link.finder, self.connect_timeout, self.max_in_flight, self.tls_context,
                self.credentials, self.request_timeout,
                self._backoff)
            self._core.adopt_server_limits(ping)
            link.attach(conn)
            return conn

    async def call(self, op: Op, fields: dict[str, Any], *,
                   retries: int | None = None) -> dict[str, Any]:
        """Send one request and wait for its answer, retrying retriable errors within
        ``delivery_timeout`` (and ``retries``, when counted), as the threaded client does (a
        retried send may store a message twice unless the producer is idempotent)."""
        attempts = self.attempts(retries)
        while True:
            try:
                conn = await self._connection()
                return await conn.request(op, fields, attempts.cap(self.request_timeout))
            except FMQError as exc:
                await asyncio.sleep(attempts.pause(exc, self._closed))

    async def ping(self) -> dict[str, Any]:
        return await self.call(Op.PING, {})

    async def send(self, topic: str, body: bytes, key: str | None = None,
                   tags: str | None = None, properties: dict[str, str] | None = None,
                   queue_id: int | None = None, *, deliver_at: int | datetime | None = None,
                   delay: float | timedelta | None = None) -> SendResult | ScheduledSend:
        """Store one message; returns once it is durable on the server. ``deliver_at`` /
        ``delay``: as :meth:`fmq.client.producer.Producer.send` (a scheduled message, which
        takes no sequence number)."""
        message = Message(topic, body, key, tags, properties, queue_id)
        if deliver_at is None and delay is None:
            msg = message_to_wire(self._sequencer.stamp(message))
            return result_from_wire((await self.call(Op.SEND, {"message": msg}))["result"])
        fields = {"message": message_to_wire(message), **schedule_to_wire(deliver_at, delay)}
        return scheduled_from_wire(await self.call(Op.SEND_AT, fields))

    async def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Store several messages in one request and one group commit: all or none."""
        wire = [message_to_wire(self._sequencer.stamp(m)) for m in messages]
        if not wire:
            return []
        answer = await self.call(Op.SEND_BATCH, {"messages": wire})
        return [result_from_wire(r) for r in answer["results"]]

    # ------------------------------------------------------------------ batching

    async def send_async(self, topic: str, body: bytes, key: str | None = None,
                         tags: str | None = None, queue_id: int | None = None,
                         properties: dict[str, str] | None = None) -> asyncio.Future:
        """Queue one message for a batch (waiting up to ``max_block_s`` for buffer room);
        the returned future resolves to its SendResult once the batch is durable, or
        raises the batch's FMQError."""
        if self._closed:
            raise BrokerClosed("this producer is closed; create a new one")
        args = (topic, body, key, tags, properties, queue_id)
        part, sequence = self._sequencer.encode(*args)
        queue, n = self._queue, len(part)
        if self._core.no_room_for(n):
            await self._wait_for_room(n)
            if sequence is not None:  # overtaken while it waited: numbered again, in order
                part, sequence = self._sequencer.encode(*args)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if self._sender is None:
            self._sender = loop.create_task(self._run())
        if queue.add(part, fut, loop.time(), sequence):
            self._wake.set()
        return fut

    async def _wait_for_room(self, n: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._core.max_block_s
        while self._core.no_room_for(n):
            rest = deadline - loop.time()
            if rest <= 0 or self._closed:
                raise self._core.buffer_full()
            self._progress.clear()
            try:
                async with asyncio.timeout(rest):  # no task per wait, unlike wait_for
                    await self._progress.wait()
            except TimeoutError:
                pass

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message given to :meth:`send_async` before this call has its
        outcome; raises RequestTimeout (via asyncio.wait_for) after ``timeout`` seconds."""
        upto = self._queue.close_open()
        self._wake.set()

        async def all_done() -> None:
            while self._queue.waiting_before(upto):
                self._progress.clear()
                await self._progress.wait()

        try:
            await asyncio.wait_for(all_done(), timeout)
        except TimeoutError:
            raise self._core.flush_timed_out(upto, timeout) from None

    async def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout``), then close; messages still unsent fail with
        BrokerClosed."""
        try:
            await self.flush(timeout)
        finally:
            self._closed = True
            left, closed = self._core.abandon()
            for batch in left:
                complete(batch, closed)
            self._wake.set()
            if self._sender is not None:
                self._sender.cancel()
                try:
                    await self._sender
                except asyncio.CancelledError:
                    pass
            for conn in self.links.take_all():
                await conn.close()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ the sender task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self._queue
        while not self._closed:
            now = loop.time()
            for batch in queue.expired(now):
                self._time_out(batch)
            batch, wait = queue.next_batch(now, self._core.max_in_flight)
            if batch is None:
                self._wake.clear()
                try:
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue
            await self._send(batch)

    def _time_out(self, batch: Batch) -> None:
        error = self._core.overdue(batch, self.request_timeout)
        entry = self._requests.get(batch)
        if entry is not None:
            entry[0].forget(entry[1], error)

    async def _send(self, batch: Batch) -> None:
        try:
            conn = await self._connection()
        except FMQError as exc:
            self._failed(batch, exc, written=False)
            return
        fitted, too_large = self._queue.fit(batch)
        if too_large is not None:
            complete(too_large, self._core.too_large())
            self._queue.finished(too_large)
            self._progress.set()
        if fitted is None:
            return
        fut = submit_batch(conn, fitted, self._failed)
        if fut is None:
            return
        self._queue.sending(fitted, asyncio.get_running_loop().time() + self.request_timeout)
        self._requests[fitted] = (conn, fut)
        fut.add_done_callback(lambda f: self._answered(fitted, f))
        await conn.drain()

    def _answered(self, batch: Batch, fut: asyncio.Future) -> None:
        self._requests.pop(batch, None)
        exc = fut.exception()
        if exc is not None:
            self._failed(batch, exc, written=True)
            return
        if batch.done:
            return
        complete(batch, fut.result())
        self._queue.finished(batch)
        self._progress.set()
        self._wake.set()

    def _failed(self, batch: Batch, exc: BaseException, written: bool) -> None:
        verdict = self._core.failed(batch, exc, written, self._closed,
                                    asyncio.get_running_loop().time())
        if verdict is None:
            return
        failing, error = verdict
        for b in failing:
            complete(b, error)
            self._queue.finished(b)
        if failing:
            self._progress.set()
        self._wake.set()
