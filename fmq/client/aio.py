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
from functools import partial
from typing import Any

from fmq.errors import (
    BrokerClosed,
    FMQError,
    InvalidArgument,
    NotHosted,
    PrimaryNotFound,
    RequestTimeout,
)
from fmq.message import Message, ScheduledSend, SendResult, check_topic
from fmq.protocol import DEFAULT_MAX_FRAME, Op
from fmq.protocol.values import message_to_wire, schedule_to_wire, scheduled_from_wire

from .acquire import OWN_LINK, LinkPool, PooledClient, broker_group_of, link_of
from .aio_connection import AsyncConnection, find_node
from .aio_sender import AsyncBatchSender
from .batch_sending import BatchSending
from .batching import Limits
from .cluster.placement import choose_queue
from .cluster.route_table import DEFAULT_ROUTE_REFRESH_S, Route
from .cluster.router import Build, PlacedRequest, Router
from .connection import parse_servers
from .deadline import DEFAULT_DELIVERY_TIMEOUT
from .discovery import PRIMARY, Finder
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
                 password_file: str | None = None,
                 route_refresh_s: float = DEFAULT_ROUTE_REFRESH_S) -> None:
        if (batch_size < 1 or max_batch_messages < 1 or buffer_memory < 1 or linger_ms < 0
                or dedup_window_messages < 1):
            raise InvalidArgument("batch_size, max_batch_messages, buffer_memory and "
                                  "dedup_window_messages must be positive and linger_ms at "
                                  "least 0")
        self.servers = parse_servers(servers)
        self._connect_options(tls=tls, user=user, password=password, password_file=password_file,
                              request_timeout=request_timeout, connect_timeout=connect_timeout,
                              retries=retries, delivery_timeout=delivery_timeout,
                              backoff_initial=backoff_initial,
                              backoff_max=backoff_max, max_in_flight=max_in_flight)
        self._batching = (Limits(batch_size, max_batch_messages, DEFAULT_MAX_FRAME),
                          linger_ms / 1000, buffer_memory, max_block_s, dedup_window_messages)
        self._conn_lock: asyncio.Lock | None = None
        #: This producer's connection, and in a cluster one per broker group it sends to.
        self.links = LinkPool.single(Finder(self.servers, PRIMARY))
        self.router = Router(self.links, idempotent, producer_id, route_refresh_s)
        self._sequencer = self.router.sequencer_single
        self.idempotent = idempotent
        self.producer_id = self._sequencer.producer_id
        self._closed = False
        #: The batches of each link (the producer's own, or a routed broker group's), and
        #: the arguments of each routed message not answered yet (placed anew on NotHosted).
        self._senders: dict[str, AsyncBatchSender] = {}
        self._rereads: set[asyncio.Task] = set()
        self._routed: dict[asyncio.Future, tuple] = {}
        self._replacing: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ requests

    async def _connection(self, link: str = OWN_LINK) -> AsyncConnection:
        held = self.links.get(link)
        if held is None:  # a routed group whose primary no route has named yet
            raise PrimaryNotFound(f"broker group {broker_group_of(link)} has no primary "
                                  f"now (its route names none); retry later")
        conn = held.usable()
        if conn is not None:
            return conn
        if self._conn_lock is None:
            self._conn_lock = asyncio.Lock()
        async with self._conn_lock:
            conn, stale = held.claim(self._closed, "producer")
            if conn is not None:
                return conn
            if stale is not None:
                await stale.close()
            conn, ping = await find_node(
                held.finder, self.connect_timeout, self.max_in_flight, self.tls_context,
                self.credentials, self.request_timeout,
                self._backoff)
            self._sender(link).core.adopt_server_limits(ping)
            held.attach(conn)
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

    # ------------------------------------------------------------------ routes

    async def route(self, topic: str, retries: int | None = None) -> Route:
        """``topic``'s route, read with ROUTE when none fresh enough is held."""
        held = self.router.table.current(topic)
        if held is not None:
            return held
        check_topic(topic)  # before asking: "" would ask for every route
        try:
            answer: dict[str, Any] | FMQError = await self.call(Op.ROUTE, {"topic": topic},
                                                                retries=retries)
        except FMQError as exc:
            answer = exc
        return self.router.take(topic, answer)

    def _unreachable(self, broker_group: str) -> None:
        """A sender could not reach ``broker_group``'s primary: read the routes through
        that group again (in a task: the sender's next try waits its back-off), which moves
        its link to the primary they name now (a fail-over)."""
        self.router.table.unreachable(broker_group)

        async def reread() -> None:
            for topic in self.router.table.topics_in(broker_group):
                try:
                    await self.route(topic, retries=0)
                except FMQError:
                    return  # the sender's next try asks again

        task = asyncio.ensure_future(reread())
        self._rereads.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._rereads.discard)

    async def _deliver(self, op: Op, messages: Sequence[Message], build: Build,
                       stamp: bool = True) -> tuple[dict[str, Any], PlacedRequest]:
        """:meth:`fmq.client.cluster.sends.RoutedSends.deliver`, awaiting."""
        attempts = self.attempts()
        pinned: PlacedRequest | None = None
        while True:
            placed = pinned
            try:
                if placed is None:
                    routes = [await self.route(m.topic) for m in messages]
                    placed = self.router.place(routes, messages, build, stamp)
                    if placed.single:
                        pinned = placed  # one group: numbered once, as before routing
                elif not placed.single:  # kept in its group: follow the group's new primary
                    for topic in dict.fromkeys(placed.topics):
                        await self.route(topic, retries=0)
                conn = await self._connection(placed.link)
            except FMQError as exc:
                if placed is not None:
                    self.router.learn(exc, placed)
                await asyncio.sleep(attempts.pause(exc, self._closed))
                continue
            try:
                return await conn.request(op, placed.fields,
                                          attempts.cap(self.request_timeout)), placed
            except FMQError as exc:
                self.router.learn(exc, placed)
                pinned = self.router.pin(exc, placed, pinned)
                await asyncio.sleep(attempts.pause(exc, self._closed))

    async def send(self, topic: str, body: bytes, key: str | None = None,
                   tags: str | None = None, properties: dict[str, str] | None = None,
                   queue_id: int | None = None, *, deliver_at: int | datetime | None = None,
                   delay: float | timedelta | None = None) -> SendResult | ScheduledSend:
        """Store one message; returns once it is durable on the server. ``deliver_at`` /
        ``delay``: as :meth:`fmq.client.Producer.send` (a scheduled message, which
        takes no sequence number)."""
        message = Message(topic, body, key, tags, properties, queue_id)
        message_to_wire(message)  # a value the wire cannot carry fails before any ROUTE
        if deliver_at is None and delay is None:
            answer, placed = await self._deliver(Op.SEND, [message],
                                                 lambda w: {"message": w[0]})
            return self.router.results([answer["result"]], placed)[0]
        schedule = schedule_to_wire(deliver_at, delay)
        answer, _ = await self._deliver(Op.SEND_AT, [message],
                                        lambda w: {"message": w[0], **schedule}, stamp=False)
        return scheduled_from_wire(answer)

    async def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Store several messages in one request and one group commit: all or none (in a
        cluster, in one broker group, as :meth:`fmq.client.Producer.send_batch`)."""
        if not messages:
            return []
        for m in messages:
            message_to_wire(m)
        answer, placed = await self._deliver(Op.SEND_BATCH, messages,
                                             lambda w: {"messages": w})
        return self.router.results(answer["results"], placed)

    # ------------------------------------------------------------------ batching

    def _sender(self, link: str, broker_group: str = "") -> AsyncBatchSender:
        sender = self._senders.get(link)
        if sender is None:
            limits, linger_s, buffer_memory, max_block_s, window = self._batching
            core = BatchSending(
                limits, linger_s, buffer_memory=buffer_memory, max_block_s=max_block_s,
                max_in_flight=self.max_in_flight,
                attempts=lambda started: self.attempts(started=started),
                idempotent=self.idempotent, dedup_window=window)
            routed = link != OWN_LINK
            # From the link: a sender a connection made first re-reads its own group's routes.
            broker_group = broker_group_of(link) if routed else broker_group
            sender = self._senders[link] = AsyncBatchSender(
                core, self.request_timeout, partial(self._connection, link), broker_group,
                self._reroute if routed else None,
                partial(self._unreachable, broker_group) if routed else None)
        elif broker_group and not sender.broker_group:
            sender.broker_group = broker_group  # the connection came first: named now
        return sender

    async def send_async(self, topic: str, body: bytes, key: str | None = None,
                         tags: str | None = None, queue_id: int | None = None,
                         properties: dict[str, str] | None = None) -> asyncio.Future:
        """Queue one message for a batch (waiting up to ``max_block_s`` for buffer room);
        the returned future resolves to its SendResult once the batch is durable, or
        raises the batch's FMQError. In a cluster, batches are per broker group."""
        if self._closed:
            raise BrokerClosed("this producer is closed; create a new one")
        args = (topic, body, key, tags, properties, queue_id)
        part, sequence = self._sequencer.encode(*args)
        route = await self._route_once(topic)
        fut = asyncio.get_running_loop().create_future()
        if route is not None and not route.single:
            self._routed[fut] = args
            try:
                await self._add_routed(fut, args, route)
            except BaseException:
                self._routed.pop(fut, None)
                raise
            fut.add_done_callback(lambda f: self._routed.pop(f, None))
            return fut
        sender = self._sender(OWN_LINK, "" if route is None else route.broker_group_name())
        if sender.core.no_room_for(len(part)):
            await sender.wait_for_room(len(part))
            if sequence is not None:  # overtaken while it waited: numbered again, in order
                part, sequence = self._sequencer.encode(*args)
        sender.add(part, fut, sequence)
        return fut

    async def _route_once(self, topic: str) -> Route | None:
        """The route of a ``send_async``, read once without retrying (the caller does not
        wait out an outage here) and not again for ``backoff_max`` after that failed; None:
        the message takes the producer's own group, whose batches retry."""
        table = self.router.table
        if table.unreadable_for(topic, self.backoff_max):
            return None
        try:
            route = await self.route(topic, retries=0)
        except FMQError:
            table.read_failed(topic)
            return None
        table.read_worked(topic)
        return route

    async def _add_routed(self, fut: asyncio.Future, args: tuple, route: Route) -> None:
        topic, body, key, tags, properties, queue_id = args
        table = self.router.table
        ref = choose_queue(route, key, queue_id, None, table.turn(topic), table.skipped())
        sequencer = self.router.sequencer(ref.group)
        placed = (topic, body, key, tags, properties, ref.queue_id)
        part, sequence = sequencer.encode(*placed)
        sender = self._sender(link_of(ref.group), ref.group)
        if sender.core.no_room_for(len(part)):
            await sender.wait_for_room(len(part))
            if sequence is not None:
                part, sequence = sequencer.encode(*placed)
        sender.add(part, fut, sequence)

    def _reroute(self, handles: list[asyncio.Future], refusal: NotHosted) -> None:
        """A group refused a batch with NotHosted: read the route again and queue each of
        its messages with the group that hosts its queue now."""
        self.router.table.not_hosted(refusal.topic)
        for fut in handles:
            args = self._routed.get(fut)
            if args is not None and not fut.done():
                self.router.table.not_hosted(args[0])
                task = asyncio.get_running_loop().create_task(self._place_again(fut, args))
                self._replacing.add(task)
                task.add_done_callback(self._replacing.discard)

    async def _place_again(self, fut: asyncio.Future, args: tuple) -> None:
        try:
            await self._add_routed(fut, args, await self.route(args[0]))
        except FMQError as exc:
            if not fut.done():
                fut.set_exception(exc)

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every message given to :meth:`send_async` before this call has its
        outcome; raises RequestTimeout after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        routed = list(self._routed)
        for sender in list(self._senders.values()):
            await sender.flush(None if deadline is None else max(0.0, deadline - loop.time()))
        if routed:  # a message sent again to another group is in that group's sender
            _done, waiting = await asyncio.wait(
                routed, timeout=None if deadline is None else max(0.0, deadline - loop.time()))
            if waiting:
                raise RequestTimeout(f"{len(waiting)} messages have no outcome after "
                                     f"{timeout}s")

    async def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout``), then close; messages still unsent fail with
        BrokerClosed."""
        try:
            await self.flush(timeout)
        finally:
            self._closed = True
            for sender in list(self._senders.values()):
                await sender.close()
            for conn in self.links.take_all():
                await conn.close()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
