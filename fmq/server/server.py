"""The asyncio server around one :class:`fmq.Broker`.

Layers (STYLE.md 8): :mod:`fmq.protocol` parses and encodes (pure);
:mod:`fmq.server.connection` does the framing on one socket and runs each request as its
own task (pipelining: answers go out in completion order, matched by request id);
:mod:`fmq.server.handlers` says what each operation does; :class:`Server` (here) holds the
broker, the limits, the thread pools, consumer groups, long-poll wake-ups and shutdown.

Blocking broker calls (waiting for the group-commit fsync, LMDB reads) run in a thread pool,
so the event loop never blocks and requests from all connections wait for the *same* fsync.
Feedback long polls block a thread too; they get their own pool so they never starve sends.
Pull long polls wait on the event loop instead (woken when a write completes).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fmq import __version__
from fmq.broker import Broker
from fmq.errors import ConfigError, ServerBusy
from fmq.message import Message, check_fits, check_message
from fmq.protocol import PROTOCOL_VERSION, encode_error
from fmq.server.config import ServerConfig
from fmq.server.connection import Connection
from fmq.server.descriptors import fit_connections
from fmq.server.groups import GroupCoordinator
from fmq.server.handlers import HANDLERS

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
        self.broker = broker
        self.config = config
        self.groups = GroupCoordinator(broker.config.queues_per_topic,
                                       config.group_session_timeout_ms)
        self.workers = ThreadPoolExecutor(config.worker_threads, thread_name_prefix="fmq-worker")
        self.pollers = ThreadPoolExecutor(config.long_poll_threads,
                                          thread_name_prefix="fmq-longpoll")
        self.handlers = HANDLERS
        self.connections: dict[int, Connection] = {}
        #: Requests in flight on every connection (tasks, and futures of fast-path sends).
        self.all_tasks: set[asyncio.Future] = set()
        self.stopping = False
        self.port = config.port
        self.requests = 0
        self.protocol_errors = 0
        self.busy_refusals = 0
        self.started = time.time()
        self._next_conn = 0
        self._server: asyncio.base_events.Server | None = None
        self._stop_event: asyncio.Event | None = None
        self._hurry: asyncio.Event | None = None  # set by a second stop signal
        #: Pull long polls wait on these: one per (topic, queue) with waiters, one per
        #: connection (it closing), and one for "anything" (transaction commits, whose
        #: queues the broker does not report).
        self._queue_events: dict[tuple[str, int], asyncio.Event] = {}
        self._conn_events: dict[int, asyncio.Event] = {}
        self._any_event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ running

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._hurry = asyncio.Event()
        self._any_event = asyncio.Event()
        self.batcher = _SendBatcher(self)
        try:
            self._server = await self._loop.create_server(
                lambda: Connection(self), self.config.host, self.config.port, backlog=1024)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {self.config.host}:{self.config.port} ({exc.strerror or exc});"
                f" stop the process using that port or choose another --port/--host") from None
        self.port = self._server.sockets[0].getsockname()[1]
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
        for conn in list(self.connections.values()):
            conn.close()
        loop = asyncio.get_running_loop()
        self.pollers.shutdown(wait=False, cancel_futures=True)
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
            why = ("the server is shutting down" if self.stopping else
                   f"{len(self.connections)} connections are open (max_connections)")
            logger.warning("refused connection from %s: %s", conn.peer, why)
            conn.send(encode_error(0, 0, ServerBusy(f"{why}; retry later")))
            conn.close()
            return
        self.connections[conn.id] = conn
        logger.info("connection %d from %s", conn.id, conn.peer)

    def _connection_lost(self, conn: Connection) -> None:
        # Requests still running finish (a send being fsync'd completes); answers are dropped.
        self._wake_pullers(conn)
        if self.connections.pop(conn.id, None) is None:
            return
        for group, member in self.groups.drop_owner(conn):
            logger.info("group %s: member %s left with its connection", group, member)
        logger.info("connection %d from %s closed", conn.id, conn.peer)

    async def _expire_members(self) -> None:
        tick = min(1.0, self.config.group_session_timeout_ms / 4000)
        while True:
            await asyncio.sleep(tick)
            for group, member in self.groups.expire():
                logger.info("group %s: member %s expired (no heartbeat)", group, member)

    # ------------------------------------------------------------------ helpers

    def run(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """Run a blocking broker call in the worker pool."""
        return self._loop.run_in_executor(self.workers, fn, *args)

    def data_arrived(self, queues: set[tuple[str, int]] | None = None) -> None:
        """A write completed: wake the pull long polls of ``queues`` (None: all of them)."""
        if queues is None:
            self._wake_pullers()
            return
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
        if self._any_event is not None:
            events.append(self._any_event)
            self._any_event = asyncio.Event()
        for ev in events:
            ev.set()

    def pull_waiters(self, topic: str, queue_id: int, conn: Connection) -> list[asyncio.Event]:
        """The events a pull of ``topic``/``queue_id`` waits on: its queue, any commit, its
        connection closing."""
        qev = self._queue_events.get((topic, queue_id))
        if qev is None:
            qev = self._queue_events[(topic, queue_id)] = asyncio.Event()
        cev = self._conn_events.get(conn.id)
        if cev is None:
            cev = self._conn_events[conn.id] = asyncio.Event()
        return [qev, self._any_event, cev]

    def wait_ms(self, requested: int) -> float:
        return min(requested, self.config.max_wait_ms) / 1000.0

    def server_stats(self) -> dict:
        """The server's own counters (event-loop thread only: it reads loop state)."""
        return {
            "version": __version__,
            "connections": len(self.connections),
            "requests": self.requests,
            "in_flight": len(self.all_tasks),
            "protocol_errors": self.protocol_errors,
            "busy_refusals": self.busy_refusals,
            "uptime_s": round(time.time() - self.started, 3),
            "groups": self.groups.describe(),
        }


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
        connections = fit_connections(server_config.max_connections,
                                      server_config.descriptor_reserve)
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
