"""What every client shares: server addresses, one pipelined connection, reconnect with
back-off, time-outs and retries of retriable errors."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from fmq.errors import ConnectionLost, FMQError, OffsetOutOfRange, PrimaryNotFound
from fmq.message import StoredMessage
from fmq.protocol import Op
from fmq.protocol.values import stored_from_wire

from .acquire import (
    OWN_LINK,
    Ask,
    Drop,
    LinkPool,
    Open,
    PooledClient,
    Search,
    broker_group_of,
    search_steps,
)
from .connection import Connection, parse_servers
from .deadline import Attempts
from .discovery import ANY, Finder
from .tls import TLSSetting
from .topic_admin import TopicAdmin

logger = logging.getLogger("fmq.client")


class Client(PooledClient, TopicAdmin):
    """Base of Producer, TransactionProducer and Consumer; alone, a client for any request.

    ``request_timeout``: seconds to wait for one answer. A request that failed with a
    *retriable* error (connection lost, time-out, server busy, not the primary, ...) is
    sent again after a back-off from ``backoff_initial`` doubling (with jitter) up to
    ``backoff_max`` seconds, at most ``retries`` times (None: no count) and until
    ``delivery_timeout`` seconds after it was first sent (None: no deadline; producers'
    default 120 s, :mod:`fmq.client.deadline`). A retried send may store a message twice
    (at-least-once), unless the producer is idempotent (:class:`~fmq.client.Producer`'s
    default). ``max_in_flight``:
    requests this client keeps in flight at once on its connection (threads beyond it wait
    for a slot); keep it at or below the server's ``max_in_flight``. ``tls``: None
    (plaintext), a :class:`~fmq.client.tls.TLSOptions`, an ``ssl.SSLContext``, or True
    (TLS trusting the system's CAs). ``user`` and ``password`` (or ``password_file``, or
    the environment: FMQ_USER with FMQ_PASSWORD or FMQ_PASSWORD_FILE): log in with SCRAM on
    every connection; see docs/security.md.

    ``servers``: one address or several (``"h1:p1,h2:p2"``, a broker group). ``node``:
    ``"any"`` (this class's default): the first server that answers, moving on to the
    primary a NotPrimary error names; ``"primary"`` (producers' and consumers' default):
    the primary, found on every new connection by asking each node (HELLO), with
    ``preferred_server`` tried first (docs/client.md, "Several servers")."""

    def __init__(self, servers: str | Sequence[str], *, request_timeout: float = 10.0,
                 connect_timeout: float = 5.0, retries: int | None = 3,
                 delivery_timeout: float | None = None, backoff_initial: float = 0.05, backoff_max: float = 2.0,
                 max_in_flight: int = 128, tls: TLSSetting = None, user: str | None = None,
                 password: str | None = None, password_file: str | None = None,
                 node: str = ANY, preferred_server: str | None = None) -> None:
        self.servers = parse_servers(servers)
        #: This client's links: its own (:data:`OWN_LINK`), and a routing producer's one per
        #: broker group.
        self.links = LinkPool.single(
            Finder(self.servers, node,
                   parse_servers(preferred_server)[0] if preferred_server else None))
        self._connect_options(tls=tls, user=user, password=password, password_file=password_file,
                              request_timeout=request_timeout, connect_timeout=connect_timeout,
                              retries=retries, delivery_timeout=delivery_timeout,
                              backoff_initial=backoff_initial,
                              backoff_max=backoff_max, max_in_flight=max_in_flight)
        #: The user the server authenticated this client as (None: no log-in).
        self.principal: str | None = None
        self._conn_lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ connection

    @property
    def connection_seq(self) -> int:
        """Connections this client opened so far (part of generated transaction ids)."""
        return self.links[OWN_LINK].opened

    def _connection(self, link: str = OWN_LINK) -> Connection:
        """The open connection of ``link``, found first if there is none."""
        held = self.links.get(link)
        if held is None:  # a routed group whose primary no route has named yet
            raise PrimaryNotFound(f"broker group {broker_group_of(link) or link} has no "
                                  f"primary now (its route names none); a fail-over may be "
                                  f"under way: retry later")
        conn = held.usable()
        if conn is not None:
            return conn
        with self._conn_lock:
            conn, stale = held.claim(self._closed, "client")
            if conn is not None:
                return conn
            if stale is not None:
                stale.close()
            held.attach(self._find(held.finder))
            logger.debug("connected to %s:%d", *held.conn.address)
            return held.conn

    def _find(self, finder: Finder) -> Connection:
        """A connection to the node ``finder`` looks for (:func:`search_steps`)."""
        search = Search(search_steps(finder, self.credentials, self.request_timeout,
                                     self.connect_timeout, self._backoff))
        conn: Connection | None = None
        outcome: Any = None
        while (step := search.advance(outcome)) is not None:
            outcome = None
            try:
                if isinstance(step, Open):
                    conn = Connection(step.address, self.connect_timeout,
                                      max_in_flight=self.max_in_flight, tls=self.tls_context)
                elif isinstance(step, Ask):
                    outcome = conn.request(step.op, step.fields, step.timeout)
                elif isinstance(step, Drop):
                    conn.close()
                else:
                    time.sleep(step.seconds)
            except FMQError as exc:
                outcome = exc
        if search.found.principal is not None:
            self.principal = search.found.principal
        return conn

    def call(self, op: Op, fields: dict[str, Any], *, timeout: float | None = None,
             retries: int | None = None, link: str = OWN_LINK,
             attempts: Attempts | None = None) -> dict[str, Any]:
        """Send one request and wait for its answer, retrying retriable errors within this
        client's ``retries`` (or the ``retries`` given here) and ``delivery_timeout``
        (``link``: the broker group's link it goes on, the client's own by default;
        ``attempts``: a budget some attempts of this request used already)."""
        timeout = self.request_timeout if timeout is None else timeout
        attempts = attempts or self.attempts(retries)
        while True:
            try:
                return self._connection(link).request(op, fields, attempts.cap(timeout))
            except FMQError as exc:
                if link != OWN_LINK and isinstance(exc, (ConnectionLost, PrimaryNotFound)):
                    self._link_lost(link)
                delay = attempts.pause(exc, self._closed)
                logger.debug("%s failed (%s); retry %d in %.2fs", op.name, exc,
                             attempts.attempt, delay)
                time.sleep(delay)

    def _link_lost(self, link: str) -> None:
        """A request on a broker group's ``link`` found no primary there: a routing client
        reads that group's routes again (they name its new primary after a fail-over)."""

    def submit(self, op: Op, fields: dict[str, Any]) -> Future:
        """Send without waiting (pipelining); no retry."""
        return self._connection().submit(op, fields)

    def ping(self) -> dict[str, Any]:
        """Server version and limits."""
        return self.call(Op.PING, {})

    def query_key(self, topic: str, key: str, limit: int = 32,
                  since_ms: int | None = None) -> list[StoredMessage]:
        """The messages of ``topic`` stored with ``key`` (at most ``limit``, the first ones
        found; RocketMQ's ``queryMsgByKey``), those stored before ``since_ms`` (ms since
        the epoch) left out."""
        answer = self.call(Op.QUERY_KEY, {"topic": topic, "key": key, "limit": limit})
        found = [stored_from_wire(d) for d in answer["messages"]]
        if since_ms is not None:
            found = [m for m in found if m.store_time >= since_ms]
        return found

    def get_message(self, topic: str, queue_id: int, offset: int) -> StoredMessage:
        """The message at queue offset ``offset`` of (``topic``, ``queue_id``). Raises
        OffsetOutOfRange, naming the offsets the queue holds, when there is none there
        (never written, or deleted by retention)."""
        answer = self.call(Op.PULL, {"topic": topic, "queue_id": queue_id, "offset": offset,
                                     "max_messages": 1, "wait_ms": 0})
        found = [stored_from_wire(d) for d in answer["messages"]]
        if not found or found[0].queue_offset != offset:
            raise OffsetOutOfRange(
                f"no message at offset {offset} of {topic!r} queue {queue_id}: it holds "
                f"offsets {answer['min_offset']} to {answer['next_offset'] - 1}"
                if answer["next_offset"] > answer["min_offset"] else
                f"no message at offset {offset} of {topic!r} queue {queue_id}: the queue "
                f"holds no message (next offset {answer['next_offset']})")
        return found[0]

    def close(self) -> None:
        with self._conn_lock:
            self._closed = True
            for conn in self.links.take_all():
                conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
