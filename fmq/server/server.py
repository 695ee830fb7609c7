"""The asyncio server around one :class:`fmq.Broker`.

Layers: :mod:`fmq.protocol` parses and encodes (pure);
:mod:`fmq.server.connection` does the framing on one socket and runs each request as its
own task (pipelining: answers go out in completion order, matched by request id);
:mod:`fmq.server.handlers` says what each operation does; :class:`Server` (here) holds the
broker, the limits, the thread pools, consumer groups, long-poll wake-ups and shutdown.

Blocking broker calls run in thread pools, so the event loop never blocks: writes (sends,
transactions, offset commits) in ``workers``, where requests from all connections wait for
the *same* fsync; reads (pulls and queries) in ``readers``, so many consumers never queue
ahead of sends; feedback long polls in ``pollers``. Pull long polls wait on the event loop,
woken only when a write lands in their own queue.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fmq.engine.broker import Broker
from fmq.errors import ConfigError, InvalidArgument, ServerBusy
from fmq.log.sizing import check_fits
from fmq.message import Message, check_message
from fmq.protocol import PROTOCOL_VERSION, Op, encode_error
from fmq.server.budgets import SharedBudget
from fmq.server.config import ServerConfig
from fmq.server.connection import Connection
from fmq.server.descriptors import fit_connections
from fmq.server.groups import GroupCoordinator, GroupLimits
from fmq.server.handlers import HANDLERS
from fmq.server.replies import largest_single_reply
from fmq.server.request_limits import ListLimit, RequestLimits
from fmq.version import __version__

logger = logging.getLogger("fmq.server")


class _SendBatcher:
    """Coalesces the sends that arrive in one event-loop turn, from every connection, into
    one ``broker.send_batch``: one thread hand-off and one log-lock hold for all of them
    (the log's group commit then batches the fsync across batches in flight).

    Every message is checked before it joins a batch, so one bad message fails only its own
    request; what can still fail a batch (a failed fsync, a closed broker) fails every
    request in it, and none of them was acknowledged."""

    MAX_BATCH = 4096  # messages per send_batch
    MAX_BATCH_BYTES = 16 * 1024 * 1024  # body bytes per send_batch (it holds the log lock)

    def __init__(self, server: Server) -> None:
        self.server = server
        self.pending: list[tuple[list[Message], asyncio.Future]] = []
        self.scheduled = False

    def submit(self, msgs: list[Message]) -> asyncio.Future:
        cfg = self.server.broker.config
        limit = self.server.config.max_batch_messages
        if len(msgs) > limit:  # the wire checks this before decoding; embedded callers here
            raise InvalidArgument(f"a batch of {len(msgs)} messages is over the limit "
                                  f"(max_batch_messages) of {limit}; send smaller batches")
        for m in msgs:
            check_message(m, cfg.max_message_size, cfg.queues_per_topic)
            check_fits(m, cfg.segment_size)
        loop = self.server._loop
        fut = loop.create_future()
        self.pending.append((msgs, fut))
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self._flush)
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
            done = self.server._loop.run_in_executor(self.server.workers,
                                                     self.server.broker.send_batch, msgs)
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
            self.server.data_arrived({(m.topic, r.queue_id)
                                      for m, r in zip(sent, results, strict=True)})


# ---------------------------------------------------------------- server


class Server:
    """Serve ``broker`` on ``config.host:config.port`` until :meth:`request_stop`."""

    def __init__(self, broker: Broker, config: ServerConfig) -> None:
        #: Bytes of the largest one-message PULL/QUERY_KEY answer this broker can produce.
        self.largest_reply = largest_single_reply(broker.config.max_message_size)
        if self.largest_reply > config.reply_budget_per_connection:
            raise ConfigError(
                f"invalid server configuration: reply_budget_per_connection "
                f"({config.reply_budget_per_connection}) must hold one answer carrying the "
                f"largest message ({self.largest_reply} bytes with max_message_size "
                f"{broker.config.max_message_size}); raise it or lower max_message_size")
        self.broker = broker
        self.config = config
        self.groups = GroupCoordinator(
            broker.config.queues_per_topic, config.group_session_timeout_ms,
            limits=GroupLimits(config.max_topics_per_member, config.max_members_per_group,
                               config.max_members_per_connection))
        self.limits = request_limits(broker, config)
        self.workers = ThreadPoolExecutor(config.worker_threads, thread_name_prefix="fmq-worker")
        self.readers = ThreadPoolExecutor(config.read_threads, thread_name_prefix="fmq-reader")
        self.pollers = ThreadPoolExecutor(config.long_poll_threads,
                                          thread_name_prefix="fmq-longpoll")
        self.handlers = HANDLERS
        self.request_budget = SharedBudget("request", config.request_budget_total,
                                           config.request_budget_per_connection)
        self.reply_budget = SharedBudget("reply", config.reply_budget_total,
                                         config.reply_budget_per_connection)
        #: Established connections (they sent a complete request), and the ones that have
        #: not yet, oldest first.
        self.connections: dict[int, Connection] = {}
        self.pending: dict[int, Connection] = {}
        #: Requests in flight on every connection (tasks, and futures of fast-path sends).
        self.all_tasks: set[asyncio.Future] = set()
        self.stopping = False
        self.port = config.port
        self.requests = 0
        self.protocol_errors = 0
        self.busy_refusals = 0
        #: Pull long polls waiting now, how many waits data in their queue ended, and how
        #: many times a PULL read its queue.
        self.pulls_waiting = 0
        self.pull_wakeups = 0
        self.pull_reads = 0
        self.timed_out = 0  # connections closed by a time-out or to make room
        self.started = time.time()
        self._next_conn = 0
        self._server: asyncio.base_events.Server | None = None
        self._stop_event: asyncio.Event | None = None
        self._hurry: asyncio.Event | None = None  # set by a second stop signal
        #: Pull long polls wait on these: one per (topic, queue) with waiters (set when a
        #: write lands there) and one per connection (set when it closes).
        self._queue_events: dict[tuple[str, int], asyncio.Event] = {}
        self._conn_events: dict[int, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watchdog: asyncio.Task | None = None

    def now(self) -> float:
        """The event loop's clock (monotonic seconds)."""
        return self._loop.time()

    # ------------------------------------------------------------------ running

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._hurry = asyncio.Event()
        self.batcher = _SendBatcher(self)
        try:
            self._server = await self._loop.create_server(
                lambda: Connection(self), self.config.host, self.config.port, backlog=1024)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {self.config.host}:{self.config.port} ({exc.strerror or exc});"
                f" stop the process using that port or choose another --port/--host") from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._watchdog = asyncio.ensure_future(self._watch_connections())
        logger.info("listening on %s:%d (protocol %d, max frame %d bytes, %d worker threads)",
                    self.config.host, self.port, PROTOCOL_VERSION, self.config.max_frame_size,
                    self.config.worker_threads)

    async def serve(self, install_signals: bool = True) -> None:
        """Start, serve until SIGINT/SIGTERM (or :meth:`request_stop`), then shut down
        gracefully: stop accepting, finish in-flight requests, close the broker."""
        await self.start()
        if install_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._loop.add_signal_handler(sig, self.request_stop, sig.name)
        expiry = asyncio.create_task(self._expire_members())
        await self._stop_event.wait()
        expiry.cancel()
        await self.shutdown()

    def request_stop(self, why: str = "stop requested") -> None:
        if not self.stopping:
            logger.info("%s: stopping (no new connections or requests; finishing in-flight)",
                        why)
        elif self._hurry is not None and not self._hurry.is_set():
            # A second Ctrl-C: stop waiting for requests in flight; the broker is still
            # closed properly (flush, checkpoint).
            logger.warning("%s again: not waiting for requests in flight", why)
            self._hurry.set()
        self.stopping = True
        self._wake_pullers()
        if self._stop_event is not None:
            self._stop_event.set()

    async def shutdown(self) -> None:
        self.stopping = True
        if self._server is not None:
            self._server.close()
        if self._watchdog is not None:
            self._watchdog.cancel()
        pending = list(self.all_tasks)
        if pending:
            hurry = asyncio.ensure_future(self._hurry.wait())
            await asyncio.wait([asyncio.gather(*pending, return_exceptions=True), hurry],
                               timeout=self.config.shutdown_grace_ms / 1000,
                               return_when=asyncio.FIRST_COMPLETED)
            hurry.cancel()
            late = [t for t in pending if not t.done()]
            if late:
                logger.warning("abandoning %d requests still running (shutdown_grace_ms %d or a "
                               "second stop signal)", len(late), self.config.shutdown_grace_ms)
        for conn in [*self.pending.values(), *self.connections.values()]:
            conn.close()
        loop = asyncio.get_running_loop()
        self.pollers.shutdown(wait=False, cancel_futures=True)
        # No read may still be inside LMDB when the broker closes it (reads are short).
        await asyncio.to_thread(self.readers.shutdown, wait=True, cancel_futures=True)
        # close() flushes, indexes and checkpoints: a clean start replays nothing.
        await loop.run_in_executor(self.workers, self.broker.close)
        self.workers.shutdown(wait=True)
        cp = self.broker.last_checkpoint
        logger.info("stopped after %d requests; checkpoint at %s", self.requests,
                    cp.recovery_offset if cp else "none")

    def _connection_made(self, conn: Connection) -> None:
        self._next_conn += 1
        conn.id = self._next_conn
        if self.stopping or len(self.connections) >= self.config.max_connections:
            self._refuse(conn)
            return
        if len(self.pending) >= self.config.max_pending_connections:
            # Half-open connections must not lock real clients out: the oldest one goes.
            oldest = self.pending.pop(next(iter(self.pending)))
            self.timed_out += 1
            oldest.abort(f"{self.config.max_pending_connections} connections have not sent a "
                         f"complete request yet (max_pending_connections); this one is the "
                         f"oldest")
        self.pending[conn.id] = conn
        logger.info("connection %d from %s", conn.id, conn.peer)

    def _refuse(self, conn: Connection) -> None:
        why = ("the server is shutting down" if self.stopping else
               f"{len(self.connections)} connections are open (max_connections)")
        logger.warning("refused connection %d from %s: %s", conn.id, conn.peer, why)
        conn.send(encode_error(0, 0, ServerBusy(f"{why}; retry later")))
        conn.close()

    def _establish(self, conn: Connection) -> bool:
        """``conn`` sent its first complete request: count it against max_connections
        (False: refused and closed)."""
        self.pending.pop(conn.id, None)
        if self.stopping or len(self.connections) >= self.config.max_connections:
            self._refuse(conn)
            return False
        conn.established = True
        self.connections[conn.id] = conn
        return True

    def _connection_lost(self, conn: Connection) -> None:
        # Requests still running finish (a send being fsync'd completes); answers are dropped.
        self._wake_pullers(conn)
        self.pending.pop(conn.id, None)
        if self.connections.pop(conn.id, None) is None:
            return
        for group, member in self.groups.drop_owner(conn):
            logger.info("group %s: member %s left with its connection", group, member)
        logger.info("connection %d from %s closed", conn.id, conn.peer)

    async def _watch_connections(self) -> None:
        """Close connections past a time-out (handshake, read, write, idle)."""
        cfg = self.config
        timeouts = [t for t in (cfg.handshake_timeout_ms, cfg.read_timeout_ms,
                                cfg.write_timeout_ms, cfg.idle_timeout_ms) if t]
        tick = min(1.0, max(0.05, min(timeouts) / 4000))
        while True:
            await asyncio.sleep(tick)
            now = self.now()
            for conn in [*self.pending.values(), *self.connections.values()]:
                why = conn.overdue(now)
                # A closing connection is watched too: a peer that does not read would
                # keep its unsent answers (flushed before the close) forever.
                if why is not None and not conn.aborted:
                    self.timed_out += 1
                    conn.abort(why)

    async def _expire_members(self) -> None:
        tick = min(1.0, self.config.group_session_timeout_ms / 4000)
        while True:
            await asyncio.sleep(tick)
            for group, member in self.groups.expire():
                logger.info("group %s: member %s expired (no heartbeat)", group, member)

    # ------------------------------------------------------------------ helpers

    def run(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """Run a blocking broker call that writes (or waits for a write) in the worker pool."""
        return self._loop.run_in_executor(self.workers, fn, *args)

    def read(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """Run a blocking broker read in the reader pool."""
        return self._loop.run_in_executor(self.readers, fn, *args)

    def data_arrived(self, queues: set[tuple[str, int]]) -> None:
        """A write completed: wake the pull long polls of ``queues``, and only those."""
        for q in queues:
            ev = self._queue_events.pop(q, None)
            if ev is not None:
                ev.set()

    def _wake_pullers(self, conn: Connection | None = None) -> None:
        """Wake every pull long poll (or those of one connection)."""
        if conn is not None:
            ev = self._conn_events.pop(conn.id, None)
            if ev is not None:
                ev.set()
            return
        events = list(self._queue_events.values()) + list(self._conn_events.values())
        self._queue_events.clear()
        self._conn_events.clear()
        for ev in events:
            ev.set()

    def pull_waiters(self, topic: str, queue_id: int, conn: Connection
                     ) -> tuple[asyncio.Event, asyncio.Event]:
        """The events a pull of ``topic``/``queue_id`` waits on: data in its queue, and its
        connection closing. Take them *before* reading the queue, so a write landing
        between the read and the wait is not missed."""
        qev = self._queue_events.get((topic, queue_id))
        if qev is None:
            qev = self._queue_events[(topic, queue_id)] = asyncio.Event()
        cev = self._conn_events.get(conn.id)
        if cev is None:
            cev = self._conn_events[conn.id] = asyncio.Event()
        return qev, cev

    async def wait_for_data(self, events: tuple[asyncio.Event, asyncio.Event],
                            timeout: float) -> bool:
        """Wait until data lands in the queue (True), or the connection closes, the server
        stops or ``timeout`` passes (False)."""
        qev, cev = events
        waits = [asyncio.ensure_future(qev.wait()), asyncio.ensure_future(cev.wait())]
        self.pulls_waiting += 1
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.pulls_waiting -= 1
            for w in waits:
                w.cancel()
        woken = qev.is_set() and not self.stopping
        self.pull_wakeups += woken
        return woken

    def wait_ms(self, requested: int) -> float:
        return min(requested, self.config.max_wait_ms) / 1000.0

    def server_stats(self) -> dict:
        """The server's own counters (event-loop thread only: it reads loop state)."""
        return {
            "version": __version__,
            "connections": len(self.connections),
            "pending_connections": len(self.pending),
            "requests": self.requests,
            "in_flight": len(self.all_tasks),
            "protocol_errors": self.protocol_errors,
            "busy_refusals": self.busy_refusals,
            "pulls_waiting": self.pulls_waiting,
            "pull_wakeups": self.pull_wakeups,
            "pull_reads": self.pull_reads,
            "timed_out": self.timed_out,
            "request_bytes": self.request_budget.used,
            "request_bytes_peak": self.request_budget.peak,
            "request_budget_waiting": self.request_budget.waiting,
            "reply_bytes": self.reply_budget.used,
            "reply_bytes_peak": self.reply_budget.peak,
            "reply_budget_waiting": self.reply_budget.waiting,
            "uptime_s": round(time.time() - self.started, 3),
            "groups": self.groups.describe(),
        }


def request_limits(broker: Broker, config: ServerConfig) -> RequestLimits:
    """The list limits checked before a request is decoded."""
    topics = ListLimit("topics", config.max_topics_per_member, "max_topics_per_member",
                       "split the topics over several members or groups")
    return RequestLimits({
        Op.SEND_BATCH: ListLimit("messages", config.max_batch_messages, "max_batch_messages",
                                 "send smaller batches"),
        Op.PREPARE: ListLimit("messages", broker.config.max_messages_per_transaction,
                              "max_messages_per_transaction",
                              "split the work into smaller transactions"),
        Op.GROUP_JOIN: topics,
        Op.GROUP_HEARTBEAT: topics,
    })


# ---------------------------------------------------------------- entry point


def run_server(data_dir: str, broker_config: Any = None,
               server_config: ServerConfig | None = None) -> None:
    """Open the broker (running recovery), serve until SIGINT/SIGTERM, close cleanly.
    Raises DataDirLocked when another process holds ``data_dir``."""
    server_config = server_config or ServerConfig()
    broker = Broker.open(data_dir, broker_config)
    rec = broker.recovery
    logger.info("recovery: replayed %d records from offset %d, %d open transactions, "
                "torn tail %s", rec.records_replayed, rec.start_offset,
                rec.open_transactions, rec.torn_tail)
    try:  # after the broker opened its segments and index: they count as in use
        # Connections that have not sent a request yet hold descriptors too.
        connections = fit_connections(server_config.max_connections,
                                      server_config.descriptor_reserve
                                      + server_config.max_pending_connections)
    except BaseException:
        broker.close()
        raise
    if connections != server_config.max_connections:
        server_config = server_config.replace(max_connections=connections)
    server = Server(broker, server_config)
    try:
        asyncio.run(server.serve())
    finally:
        broker.close()  # no-op after a graceful shutdown; releases the dir after an error
