"""The send batcher: the sends of one event-loop turn, from every session, become one
``broker.send_batch``.

One thread hand-off and one log-lock hold for all of them (the log's group commit then
batches the fsync across batches in flight). Every message is checked before it joins a
batch, so one bad message fails only its own request; what can still fail a batch (a failed
fsync, a closed broker) fails every request in it, and none of them was acknowledged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor

from fmq.engine.broker import Broker
from fmq.errors import InvalidArgument
from fmq.log.sizing import check_fits
from fmq.message import Message, SendResult, check_message

#: Called with the (topic, queue id) pairs a batch stored messages in.
StoredIn = Callable[[set[tuple[str, int]]], None]


class SendBatcher:
    """Coalesces :meth:`submit` calls into ``send_batch`` calls run in ``workers``."""

    MAX_BATCH = 4096  # messages per send_batch
    MAX_BATCH_BYTES = 16 * 1024 * 1024  # body bytes per send_batch (it holds the log lock)

    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop, workers: Executor,
                 max_batch_messages: int, stored_in: StoredIn) -> None:
        self.broker = broker
        self.loop = loop
        self.workers = workers
        self.max_batch_messages = max_batch_messages
        self.stored_in = stored_in
        self.pending: list[tuple[list[Message], asyncio.Future]] = []
        self.scheduled = False

    def submit(self, msgs: list[Message]) -> asyncio.Future[list[SendResult]]:
        """Queue ``msgs`` for the next batch; the future ends with their results once they
        are durable. Raises at once (nothing queued) for a message that cannot be stored."""
        limit = self.max_batch_messages
        if len(msgs) > limit:  # the wire checks this before decoding; embedded callers here
            raise InvalidArgument(f"a batch of {len(msgs)} messages is over the limit "
                                  f"(max_batch_messages) of {limit}; send smaller batches")
        cfg = self.broker.config
        for m in msgs:
            check_message(m, cfg.max_message_size, self.broker.queue_count)
            check_fits(m, cfg.segment_size)
        fut = self.loop.create_future()
        self.pending.append((msgs, fut))
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        self.scheduled = False
        pending, self.pending = self.pending, []
        i = 0
        while i < len(pending):
            batch: list[tuple[list[Message], asyncio.Future]] = []
            count = 0
            size = 0
            while i < len(pending) and (not batch or (
                    count + len(pending[i][0]) <= self.MAX_BATCH
                    and size < self.MAX_BATCH_BYTES)):
                item = pending[i]
                i += 1
                batch.append(item)
                count += len(item[0])
                size += sum(len(m.body) for m in item[0])
            msgs = [m for ms, _f in batch for m in ms]
            done = self.loop.run_in_executor(self.workers, self.broker.send_batch, msgs)
            done.add_done_callback(lambda d, batch=batch: self._deliver(d, batch))

    def _deliver(self, done: asyncio.Future, batch: list) -> None:
        exc = done.exception()
        pos = 0
        results = None if exc is not None else done.result()
        for msgs, fut in batch:
            if fut.done():
                continue
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(results[pos:pos + len(msgs)])
            pos += len(msgs)
        if results:
            sent = [m for ms, _f in batch for m in ms]
            self.stored_in({(m.topic, r.queue_id) for m, r in zip(sent, results, strict=True)})
