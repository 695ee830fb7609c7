"""The batches of an :class:`~fmq.client.aio.AsyncProducer` bound for one link, and the task
that sends them: the asyncio twin of :class:`fmq.client.sender.BatchSender`. One for a
producer outside a cluster, one per broker group's link in a cluster (docs/client.md,
"Routing"). The rules are :mod:`fmq.client.batching`'s; only the I/O is asyncio.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from fmq.errors import ConnectionLost, FMQError, NotHosted, PrimaryNotFound

from .batch_sending import BatchSending, submit_batch
from .batching import Batch, complete


class AsyncBatchSender:
    """One link's batch queue and sender task. ``connect``: the link's connection;
    ``broker_group``: the name its results carry; ``reroute``: takes the messages of a batch
    the group refused with NotHosted; ``unreachable``: told when no connection could be
    made."""

    def __init__(self, core: BatchSending, request_timeout: float,
                 connect: Callable[[], Awaitable[Any]], broker_group: str = "",
                 reroute: Callable[[list[asyncio.Future], NotHosted], None] | None = None,
                 unreachable: Callable[[], None] | None = None) -> None:
        self.core = core
        self.queue = core.queue
        self._request_timeout = request_timeout
        self._connect = connect
        self.broker_group = broker_group
        self._reroute = reroute
        self._unreachable = unreachable
        self._requests: dict[Batch, tuple[Any, asyncio.Future]] = {}
        self.wake = asyncio.Event()  # the sender should look again
        self.progress = asyncio.Event()  # a batch finished: buffer room, flush
        self._task: asyncio.Task | None = None
        self.closed = False

    def add(self, part: bytes, fut: asyncio.Future, sequence: int | None) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._run())
        if self.queue.add(part, fut, loop.time(), sequence):
            self.wake.set()

    async def wait_for_room(self, n: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.core.max_block_s
        while self.core.no_room_for(n):
            rest = deadline - loop.time()
            if rest <= 0 or self.closed:
                raise self.core.buffer_full()
            self.progress.clear()
            try:
                async with asyncio.timeout(rest):  # no task per wait, unlike wait_for
                    await self.progress.wait()
            except TimeoutError:
                pass

    async def flush(self, timeout: float | None = None) -> None:
        upto = self.queue.close_open()
        self.wake.set()

        async def all_done() -> None:
            while self.queue.waiting_before(upto):
                self.progress.clear()
                await self.progress.wait()

        try:
            await asyncio.wait_for(all_done(), timeout)
        except TimeoutError:
            raise self.core.flush_timed_out(upto, timeout) from None

    async def close(self) -> None:
        """Stop: messages still unsent fail with BrokerClosed."""
        self.closed = True
        left, closed = self.core.abandon()
        for batch in left:
            complete(batch, closed)
        self.wake.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    # ------------------------------------------------------------------ the sender task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self.queue
        while not self.closed:
            now = loop.time()
            for batch in queue.expired(now):
                self._time_out(batch)
            batch, wait = queue.next_batch(now, self.core.max_in_flight)
            if batch is None:
                self.wake.clear()
                try:
                    async with asyncio.timeout(wait):
                        await self.wake.wait()
                except TimeoutError:
                    pass
                continue
            await self._send(batch)

    def _time_out(self, batch: Batch) -> None:
        error = self.core.overdue(batch, self._request_timeout)
        entry = self._requests.get(batch)
        if entry is not None:
            entry[0].forget(entry[1], error)

    async def _send(self, batch: Batch) -> None:
        try:
            conn = await self._connect()
        except FMQError as exc:
            if self._unreachable is not None and isinstance(exc, (ConnectionLost,
                                                                  PrimaryNotFound)):
                self._unreachable()
            self._failed(batch, exc, written=False)
            return
        fitted, too_large = self.queue.fit(batch)
        if too_large is not None:
            complete(too_large, self.core.too_large())
            self.queue.finished(too_large)
            self.progress.set()
        if fitted is None:
            return
        fut = submit_batch(conn, fitted, self._failed)
        if fut is None:
            return
        self.queue.sending(fitted, asyncio.get_running_loop().time() + self._request_timeout)
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
        results = fut.result()
        if self.broker_group:
            results = [replace(r, group=self.broker_group) for r in results]
        complete(batch, results)
        self.queue.finished(batch)
        self.progress.set()
        self.wake.set()

    def _failed(self, batch: Batch, exc: BaseException, written: bool) -> None:
        if isinstance(exc, NotHosted) and self._reroute is not None:
            if batch.done:
                return
            self.queue.finished(batch)  # refused, nothing stored: placed anew
            self.progress.set()
            self.wake.set()
            self._reroute(list(batch.handles), exc)
            return
        verdict = self.core.failed(batch, exc, written, self.closed,
                                   asyncio.get_running_loop().time())
        if verdict is None:
            return
        failing, error = verdict
        for b in failing:
            complete(b, error)
            self.queue.finished(b)
        if failing:
            self.progress.set()
        self.wake.set()
