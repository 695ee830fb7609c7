"""The asyncio server around one :class:`fmq.Broker`: listening, sessions, time-outs and
shutdown.

Layers: :mod:`fmq.protocol` parses and encodes (pure);
:mod:`fmq.server.net.session` does the framing on one socket and runs each request on its own
(pipelining: answers go out in completion order, matched by request id);
:mod:`fmq.server.ops.table` holds what each operation does and needs, with what the
:class:`~fmq.server.context.ServerContext` offers (the broker, limits, budgets, thread
pools, the send batcher, pull wake-ups, consumer groups); :class:`Server` (here) builds that
context, accepts and refuses sessions, enforces their time-outs and stops gracefully.

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
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fmq import native
from fmq.engine.broker import Broker
from fmq.errors import ConfigError, FMQError, ServerBusy
from fmq.protocol import PROTOCOL_VERSION, Op, encode_error
from fmq.security import UserStore
from fmq.server import gc_policy
from fmq.server.authn import Authenticator
from fmq.server.cluster.cluster_users import follow_cluster_users
from fmq.server.cluster.replica_role import RoleChange, primary_access
from fmq.server.config import ServerConfig
from fmq.server.context import ServerContext
from fmq.server.kafka import open_kafka_door
from fmq.server.kafka.group_protocols import DoorlessWatch, watch_without_door
from fmq.server.net.budgets import SharedBudget
from fmq.server.net.listener import bind_listener
from fmq.server.net.replies import largest_single_reply
from fmq.server.net.request_limits import ListLimit, RequestLimits
from fmq.server.net.session import ClientSession
from fmq.server.net.tls import TLSAcceptor, server_context
from fmq.server.ops.consumer_groups import ConsumerGroupCoordinator, ConsumerGroupLimits
from fmq.server.sidecars import Sidecars
from fmq.threadname import name_os_thread
from fmq.units import size
from fmq.version import __version__

#: "compiled" or "pure": the hot path this server runs (fmq.native).
IMPLEMENTATION = native.implementation()

logger = logging.getLogger("fmq.server")


# ---------------------------------------------------------------- server


class Server:
    """Serve ``broker`` on ``config.host:config.port`` until :meth:`request_stop`."""

    def __init__(self, broker: Broker, config: ServerConfig,
                 listener: socket.socket | None = None) -> None:
        largest_reply = largest_single_reply(broker.config.max_message_size)
        if largest_reply > config.reply_budget_per_connection:
            raise ConfigError(
                f"invalid server configuration: reply_budget_per_connection "
                f"({config.reply_budget_per_connection}) must hold one answer carrying the "
                f"largest message ({largest_reply} bytes with max_message_size "
                f"{broker.config.max_message_size}); raise it or lower max_message_size")
        #: How a follower reaches its primary, built now so that unusable follow_*
        #: settings fail at start, not later.
        self._primary_access = primary_access(config) if broker.config.follow else (None, None)
        self.broker = broker
        self.config = config
        self.workers = ThreadPoolExecutor(config.worker_threads, thread_name_prefix="fmq-worker",
                                          initializer=name_os_thread)
        self.readers = ThreadPoolExecutor(config.read_threads, thread_name_prefix="fmq-reader",
                                          initializer=name_os_thread)
        self.pollers = ThreadPoolExecutor(config.long_poll_threads,
                                          thread_name_prefix="fmq-longpoll",
                                          initializer=name_os_thread)
        self.ctx = ServerContext(
            broker, config, self,
            groups=ConsumerGroupCoordinator(
                broker.topics.queue_count, config.group_session_timeout_ms,
                limits=ConsumerGroupLimits(config.max_topics_per_member, config.max_members_per_group,
                                   config.max_members_per_connection),
                queue_base=lambda t: 0 if self.ctx.routes is None else self.ctx.routes.queue_base(t)),
            limits=request_limits(broker, config),
            request_budget=SharedBudget("request", config.request_budget_total,
                                        config.request_budget_per_connection),
            reply_budget=SharedBudget("reply", config.reply_budget_total,
                                      config.reply_budget_per_connection),
            largest_reply=largest_reply, workers=self.workers, readers=self.readers,
            pollers=self.pollers)
        self.ctx.authenticator = Authenticator(UserStore(broker.path),
                                               config.auth_failure_delay_ms,
                                               config.auth_failure_max_delay_ms)
        #: Copies the cluster's users and rules into this node (None: not in a cluster).
        self.users_follower = follow_cluster_users(config, self.ctx.authenticator)
        #: Established sessions (they sent a complete request), and the ones that have
        #: not yet, oldest first.
        self.sessions: dict[int, ClientSession] = {}
        self.pending: dict[int, ClientSession] = {}
        self.port = config.port
        self.started = time.time()
        self._next_session = 0
        self._server: asyncio.base_events.Server | None = None
        self._tls: TLSAcceptor | None = None  # accepts instead of _server with TLS
        self._hurry: asyncio.Event | None = None  # set by a second stop signal
        self._watchdog: asyncio.Task | None = None
        #: The metrics endpoint and companions (the console) on threads of their own.
        self.sidecars = Sidecars()
        #: A socket already bound to host:port (see :func:`bind_listener`), or None to bind
        #: in :meth:`start`.
        self._listener = listener
        self.kafka = None  # the Kafka door, once started (with kafka_port)
        #: Without the door, in a cluster: where the Kafka brokers are (one protocol per
        #: consumer group across broker groups).
        self.kafka_watch: DoorlessWatch | None = None
        #: Called with (host, port) once the server accepts connections.
        self.on_listening: Callable[[str, int], None] | None = None
        #: Why a follower stopped copying its primary for good (the server then stops).
        self.replication_failed: FMQError | None = None
        #: The role this node takes next (docs/replication.md, *Role changes*): the server
        #: stops, and :func:`fmq.server.lifecycle.run_server` reopens the broker so.
        self.role_change: RoleChange | None = None
        #: Called with this round's ReplicationRole once it exists (the election's hook).
        self.on_role: Callable[[Any], None] | None = None

    @property
    def stopping(self) -> bool:
        return self.ctx.stopping

    # ------------------------------------------------------------------ running

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.ctx.attach(loop)
        self._hurry = asyncio.Event()
        await self.sidecars.start(self.ctx, self.stats)
        self.kafka = await open_kafka_door(self.ctx)  # None unless kafka_port is set
        if self.kafka is None:
            self.kafka_watch = watch_without_door(self.ctx)
        if self._listener is None:
            self._listener = bind_listener(self.config.host, self.config.port)
        self.port = self._listener.getsockname()[1]
        tls = server_context(self.config)
        if tls is None:
            self._server = await loop.create_server(lambda: ClientSession(self.ctx),
                                                    sock=self._listener, backlog=1024)
        else:
            self._tls = TLSAcceptor(self._listener, tls, lambda: ClientSession(self.ctx),
                                    self.config.handshake_timeout_ms / 1000,
                                    self.config.max_pending_connections)
            self._tls.start()
        self._watchdog = asyncio.ensure_future(self._watch_sessions())
        if self.users_follower is not None:
            self.users_follower.start()
        logger.info("listening on %s:%d (%s, protocol %d, max frame %s, %d worker "
                    "threads)", self.config.host, self.port,
                    "plaintext" if tls is None else "TLS", PROTOCOL_VERSION,
                    size(self.config.max_frame_size), self.config.worker_threads)
        if self.on_listening is not None:
            self.on_listening(self.config.host, self.port)
        self.ctx.replication.change_role = self._change_role
        self.ctx.replication.node = self.config.node or f"{self.config.host}:{self.port}"
        if self.on_role is not None:
            self.on_role(self.ctx.replication)
        self.ctx.replication.start_follower(f"{self.config.host}:{self.port}",
                                            self._replication_failed, self._primary_access)

    def _change_role(self, change: RoleChange) -> None:
        """Stop serving in this role (from any thread); the broker reopens in the next."""
        if self.role_change is None:
            self.role_change = change
            self.ctx.loop.call_soon_threadsafe(self.request_stop, change.describe())

    def _replication_failed(self, exc: FMQError) -> None:
        """A follower cannot go on copying (from its thread): stop serving, say why."""
        self.replication_failed = exc
        self.ctx.loop.call_soon_threadsafe(self.request_stop, "replication failed")

    async def serve(self, install_signals: bool = True) -> None:
        """Start, serve until SIGINT/SIGTERM (or :meth:`request_stop`), then shut down
        gracefully: stop accepting, finish in-flight requests, close the broker."""
        await self.start()
        if install_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.ctx.loop.add_signal_handler(sig, self.request_stop, sig.name)
        expiry = asyncio.create_task(self._expire_members())
        await self.ctx.stop_requested.wait()
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
        self.ctx.stopping = True
        self.ctx.wakeups.wake_all()
        if self.ctx.stop_requested is not None:
            self.ctx.stop_requested.set()

    async def shutdown(self) -> None:
        self.ctx.stopping = True
        if self._server is not None:
            self._server.close()
        if self._tls is not None:
            self._tls.close()
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self.users_follower is not None:
            await asyncio.to_thread(self.users_follower.stop)
        # Like pull long polls, requests waiting for reply room end now: their peer may
        # never read the answers that fill its budget.
        waiting = sum(session.replies.stop_waiting()
                      for session in [*self.pending.values(), *self.sessions.values()])
        if waiting:
            logger.info("answered %d requests waiting for reply room ServerBusy (stopping)",
                        waiting)
        pending = list(self.ctx.all_tasks)
        # Plain sends have no task each: a session's end as its last one is answered.
        pending += [d for session in self.sessions.values()
                    if (d := session.requests.drained()) is not None]
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
        for session in [*self.pending.values(), *self.sessions.values()]:
            session.close()
        loop = asyncio.get_running_loop()
        await self.sidecars.close()  # their threads read the broker: stop them before close
        self.pollers.shutdown(wait=False, cancel_futures=True)
        # No read may still be inside LMDB when the broker closes it (reads are short).
        await asyncio.to_thread(self.readers.shutdown, wait=True, cancel_futures=True)
        if self.ctx.replication is not None:  # no copy may still write as the broker closes
            await asyncio.to_thread(self.ctx.replication.stop)
        if self.ctx.batcher is not None:  # places and acknowledges what it still holds
            await asyncio.to_thread(self.ctx.batcher.close)
        # close() flushes, indexes and checkpoints: a clean start replays nothing.
        await loop.run_in_executor(self.workers, self.broker.close)
        self.workers.shutdown(wait=True)
        cp = self.broker.last_checkpoint
        logger.info("stopped after %d requests; checkpoint at %s", self.ctx.counters.requests,
                    cp.recovery_offset if cp else "none")

    # ------------------------------------------------------------------ sessions (ServerHooks)

    def session_opened(self, session: ClientSession) -> None:
        self._next_session += 1
        session.id = self._next_session
        if self.stopping or len(self.sessions) >= self.config.max_connections:
            self._refuse(session)
            return
        if len(self.pending) >= self.config.max_pending_connections:
            # Half-open connections must not lock real clients out: the oldest one goes.
            oldest = self.pending.pop(next(iter(self.pending)))
            self.ctx.counters.timed_out += 1
            oldest.abort(f"{self.config.max_pending_connections} connections have not sent a "
                         f"complete request yet (max_pending_connections); this one is the "
                         f"oldest")
        self.pending[session.id] = session
        logger.info("connection %d from %s", session.id, session.peer)

    def _refuse(self, session: ClientSession) -> None:
        why = ("the server is shutting down" if self.stopping else
               f"{len(self.sessions)} connections are open (max_connections)")
        logger.warning("refused connection %d from %s: %s", session.id, session.peer, why)
        session.send(encode_error(0, 0, ServerBusy(f"{why}; retry later")))
        session.close()

    def first_request(self, session: ClientSession) -> bool:
        """``session`` sent its first complete request: count it against max_connections
        (False: refused and closed)."""
        self.pending.pop(session.id, None)
        if self.stopping or len(self.sessions) >= self.config.max_connections:
            self._refuse(session)
            return False
        session.established = True
        self.sessions[session.id] = session
        return True

    def session_closed(self, session: ClientSession) -> None:
        # Requests still running finish (a send being fsync'd completes); answers are dropped.
        self.ctx.wakeups.session_closed(session.id)
        self.pending.pop(session.id, None)
        if self.sessions.pop(session.id, None) is None:
            return
        for group, member in self.ctx.groups.drop_owner(session):
            logger.info("group %s: member %s left with its connection", group, member)
        logger.info("connection %d from %s closed", session.id, session.peer)

    async def _watch_sessions(self) -> None:
        """Close sessions past a time-out (handshake, read, write, idle)."""
        cfg = self.config
        timeouts = [t for t in (cfg.handshake_timeout_ms, cfg.read_timeout_ms,
                                cfg.write_timeout_ms, cfg.idle_timeout_ms) if t]
        tick = min(1.0, max(0.05, min(timeouts) / 4000))
        while True:
            await asyncio.sleep(tick)
            now = self.ctx.now()
            for session in [*self.pending.values(), *self.sessions.values()]:
                why = session.overdue(now)
                # A closing session is watched too: a peer that does not read would keep
                # its unsent answers (flushed before the close) forever.
                if why is not None and not session.aborted:
                    self.ctx.counters.timed_out += 1
                    session.abort(why)

    async def _expire_members(self) -> None:
        tick = min(1.0, self.config.group_session_timeout_ms / 4000)
        while True:
            await asyncio.sleep(tick)
            for group, member in self.ctx.groups.expire():
                logger.info("group %s: member %s expired (no heartbeat)", group, member)

    def stats(self) -> dict[str, Any]:
        """The server's own counters (event-loop thread only: it reads loop state)."""
        ctx = self.ctx
        counters = ctx.counters
        return {
            "version": __version__,
            "implementation": IMPLEMENTATION,
            "gc": gc_policy.describe(),  # the garbage collector's settings and work
            "connections": len(self.sessions),
            "pending_connections": len(self.pending),
            "requests": counters.requests,
            "in_flight": len(ctx.all_tasks) + sum(session.requests.plain.count
                                                  for session in self.sessions.values()),
            "protocol_errors": counters.protocol_errors,
            "busy_refusals": counters.busy_refusals,
            "pulls_waiting": ctx.wakeups.waiting,
            "pull_wakeups": counters.pull_wakeups,
            "pull_reads": counters.pull_reads,
            "pull_reads_on_loop": counters.pull_reads_on_loop,
            "timed_out": counters.timed_out,
            "auth_failures": ctx.authenticator.failures,
            "access_denied": counters.access_denied,
            "request_bytes": ctx.request_budget.used,
            "request_bytes_peak": ctx.request_budget.peak,
            "request_budget_waiting": ctx.request_budget.waiting,
            "reply_bytes": ctx.reply_budget.used,
            "reply_bytes_peak": ctx.reply_budget.peak,
            "reply_budget_waiting": ctx.reply_budget.waiting,
            "uptime_s": round(time.time() - self.started, 3),
            "groups": ctx.groups.describe(),
            "replication": ctx.replication.describe() if ctx.replication else None,
            "kafka": self.kafka.counters.describe() if self.kafka is not None else None,
            "requests_by_op": {Op(op).name: n for op, n in enumerate(counters.by_op)
                               if n and op in Op._value2member_map_},
            "errors_by_code": [{"op": Op(op).name if op in Op._value2member_map_ else str(op),
                                "code": code, "count": n}
                               for (op, code), n in sorted(counters.errors.items())],
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
        Op.GROUP_SYNC: topics,
    })
