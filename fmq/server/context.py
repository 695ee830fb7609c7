"""What request handlers and client sessions may use of the server, and nothing else.

The :class:`~fmq.server.server.Server` builds one :class:`ServerContext` and hands it to
every :class:`~fmq.server.net.session.ClientSession` and, through it, to every handler: the
broker, the limits, the budgets, the thread pools, the send batcher, pull wake-ups, consumer
groups and the counters. Sessions report their life (opened, first request, closed) through
:class:`ServerHooks`, which the server implements; nobody reaches into the server itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol

from fmq.engine.broker import Broker
from fmq.errors import FMQError
from fmq.server.cluster.replica_role import ReplicationRole
from fmq.server.config import ServerConfig
from fmq.server.net.budgets import SharedBudget
from fmq.server.net.request_limits import RequestLimits
from fmq.server.ops.batcher import SendBatcher
from fmq.server.ops.consumer_groups import ConsumerGroupCoordinator
from fmq.server.ops.pull_answers import SharedQueues, encoded_cache
from fmq.server.ops.wakeups import PullEvents, PullWakeups


@dataclass
class ServerCounters:
    """What the server counts for ``fmq stats`` (event-loop thread only)."""

    requests: int = 0
    protocol_errors: int = 0
    busy_refusals: int = 0
    pull_reads: int = 0  # times a PULL read its queue
    pull_reads_on_loop: int = 0  # of which on the event loop (pull_on_loop_bytes)
    pull_wakeups: int = 0  # pull waits that data in their queue ended
    timed_out: int = 0  # sessions closed by a time-out or to make room
    access_denied: int = 0  # requests an access rule refused (fmq.server.authz)
    #: Decoded requests per opcode (a list: one index per request on the hot path).
    by_op: list[int] = field(default_factory=lambda: [0] * 256)
    #: Error answers per (opcode, error code).
    errors: dict[tuple[int, int], int] = field(default_factory=dict)

    def failed(self, op: int, exc: BaseException) -> None:
        """An error answer: an FMQError's code, 1 for anything else."""
        key = (op, exc.code if isinstance(exc, FMQError) else 1)
        self.errors[key] = self.errors.get(key, 0) + 1


class ServerHooks(Protocol):
    """What the server does when a session's life changes (the server implements it)."""

    def session_opened(self, session: Any) -> None:
        """A socket was accepted (the server numbers it, or refuses it)."""

    def first_request(self, session: Any) -> bool:
        """The session sent its first complete request: False when it is refused."""

    def session_closed(self, session: Any) -> None:
        """The socket is gone."""

    def stats(self) -> dict[str, Any]:
        """The server's own counters."""


class ServerContext:
    """The server's shared state as handlers and sessions see it. ``loop``, ``batcher`` and
    ``stop_requested`` exist once the server has started (:meth:`attach`)."""

    def __init__(self, broker: Broker, config: ServerConfig, hooks: ServerHooks, *,
                 groups: ConsumerGroupCoordinator, limits: RequestLimits,
                 request_budget: SharedBudget, reply_budget: SharedBudget,
                 largest_reply: int, workers: Executor, readers: Executor,
                 pollers: Executor) -> None:
        self.broker = broker
        self.config = config
        self.hooks = hooks
        self.groups = groups
        self.limits = limits
        self.request_budget = request_budget
        self.reply_budget = reply_budget
        #: Bytes of the largest one-message PULL/QUERY_KEY answer this broker can produce.
        self.largest_reply = largest_reply
        self.pollers = pollers
        self._workers = workers
        self._readers = readers
        self.wakeups = PullWakeups()
        #: PULL answers' messages encoded lately (several groups pull the same ones).
        self.encoded = encoded_cache()
        self.shared_queues = SharedQueues()
        self.counters = ServerCounters()
        #: Requests in flight on every session (tasks, and futures of sends).
        self.all_tasks: set[asyncio.Future] = set()
        self.stopping = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.batcher: SendBatcher | None = None
        self.replication: ReplicationRole | None = None
        self.stop_requested: asyncio.Event | None = None
        #: Users, SCRAM and failed attempts (:class:`fmq.server.authn.Authenticator`); set
        #: by the server.
        self.authenticator: Any = None
        #: The cluster's routes as this node follows them
        #: (:class:`fmq.server.cluster.route_membership.RouteMembership`); None outside a cluster.
        self.routes: Any = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to the running event loop (the server starts)."""
        self.loop = loop
        self.stop_requested = asyncio.Event()
        self.replication = ReplicationRole(self.broker, loop)
        # Sends wake pulls once the index has them (Broker.on_consumable), not when they
        # are flushed: woken at the flush, a pull waited in a reader thread for the index,
        # and under load for one more index batch than its own, as the flushed offset had
        # moved on by then.
        self.batcher = SendBatcher(self.broker, loop, self.config.max_batch_messages,
                                   self.replication.wait_replicated)
        # Every write wakes its pulls this way: sends, commits, scheduled messages and
        # retries the timer service delivers, a follower's copied records, and the high
        # watermark passing messages the index holds already.
        self.broker.on_consumable(self._delivered)

    def _delivered(self, queues: set[tuple[str, int]]) -> None:
        """The index made data in ``queues`` consumable (called off the event loop)."""
        if not self.wakeups.wanted(queues):
            # No pull waits for these queues (sends without consumers, or consumers of
            # other queues): skip the event loop's wake-up. A pull takes its events before
            # it reads, so one that registers after this check reads what this write made
            # consumable.
            return
        try:
            self.loop.call_soon_threadsafe(self.data_arrived, queues)
        except RuntimeError:  # the event loop is closed: no pull is waiting any more
            pass

    def now(self) -> float:
        """The event loop's clock (monotonic seconds)."""
        return self.loop.time()

    def run(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """Run a blocking broker call that writes (or waits for a write) in the worker pool."""
        return self.loop.run_in_executor(self._workers, fn, *args)

    def write(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """:meth:`run` a write (prepare, commit, rollback, offset commits and resets: OFFSET
        records) and, in ``sync`` acknowledgement
        mode, answer only once enough followers hold the log it flushed."""
        role = self.replication
        wait_replicated = role.wait_replicated if role is not None else None
        if wait_replicated is None:
            return self.run(fn, *args)
        replica = self.broker.replica

        def replicated_write() -> Any:
            result = fn(*args)
            wait_replicated(replica.flushed_offset)  # covers every record fn wrote
            return result

        return self.run(replicated_write)

    def read(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """Run a blocking broker read in the reader pool."""
        return self.loop.run_in_executor(self._readers, fn, *args)

    def wait_ms(self, requested: int) -> float:
        """Seconds a long poll asking for ``requested`` ms may wait (max_wait_ms caps it)."""
        return min(requested, self.config.max_wait_ms) / 1000.0

    def data_arrived(self, queues: set[tuple[str, int]]) -> None:
        """A write completed: wake the pull long polls of ``queues``, and only those.

        The woken pulls the session's step reads at once answer in this call
        (:func:`fmq.server.ops.plain_pull.wait_then`); they are written as the send
        pipeline's answers are (:class:`~fmq.server.net.answer_writes.AnswerWrites`): each
        connection's in one piece, sent to the sockets with the interpreter lock released
        once, not one ``write`` per PULL (a consumer following four queues woke four)."""
        batcher = self.batcher
        if batcher is None:
            self.wakeups.data_arrived(queues)
            return
        with batcher.answer_writes:
            self.wakeups.data_arrived(queues)

    async def wait_for_data(self, events: PullEvents, timeout: float) -> bool:
        """Wait until data lands in the queue (True), or the session closes, the server
        stops or ``timeout`` passes (False)."""
        woken = await self.wakeups.wait(events, timeout, self.loop) and not self.stopping
        self.counters.pull_wakeups += woken
        return woken


class RequestSession(Protocol):
    """What a handler uses of the session its request came on."""

    id: int
    peer: str
    closing: bool  # no more requests will be read
    lost: bool  # the socket is gone: answers can no longer be delivered
    leases_taken: bool  # it polled for feedback: its leases are returned when it closes
    principal: str | None  # the user it authenticated as (None: not authenticated)
    scram: Any  # the SCRAM exchange under way (between AUTH_START and AUTH_FINISH)
    auth_failures: int  # failed authentications on this connection

    async def reserve_reply(self, want: int, minimum: int) -> int:
        """Take between ``minimum`` and ``want`` reply bytes for the running request."""

    def unreserve_reply(self, n: int) -> None:
        """Give back reply bytes of the running request it will not use."""
