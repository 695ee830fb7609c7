"""Getting a client its connection, without doing any I/O: which address to open, what to
ask on it, when to drop it and how long to wait, and which connection each broker group's
requests use.

:func:`search_steps` is a generator of :data:`Step` values; the threaded client
(:mod:`fmq.client.base`) performs each with a blocking socket, the asyncio producer
(:mod:`fmq.client.aio`) by awaiting, and both hand the outcome back through
:class:`Search`. :class:`LinkPool` holds one :class:`Link` (a :class:`Finder` and the
connection it found) per broker group: the client's own (:data:`OWN_LINK`, the servers it
was given) and, in a cluster, one per routed broker group (:func:`link_of`).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from fmq.errors import BrokerClosed, ConnectionLost, FMQError, NotSent, RequestTimeout
from fmq.protocol import Op

from .auth import Credentials, resolve_credentials
from .connection import closed_before_handshake, no_handshake
from .deadline import Attempts, check_retry_options
from .discovery import Address, Finder, handshake_steps
from .tls import TLSSetting, client_context

#: The link of the servers a client was given (the only one outside a cluster).
OWN_LINK = "default"


def link_of(broker_group: str) -> str:
    """The link of a routed broker group (apart from the client's own, whatever the
    group's name: "/" is in no group name)."""
    return f"group/{broker_group}"


def broker_group_of(link: str) -> str:
    """The broker group of a link :func:`link_of` named ("" for the client's own)."""
    return link.partition("/")[2] if link != OWN_LINK else ""


@dataclass(frozen=True)
class Open:
    """Open a connection to ``address`` (the driver keeps it); raises ConnectionLost."""

    address: Address


@dataclass(frozen=True)
class Ask:
    """Send one request on the connection just opened; the answer goes back."""

    op: Op
    fields: dict[str, Any]
    timeout: float


@dataclass(frozen=True)
class Drop:
    """Close the connection just opened: it will not do."""


@dataclass(frozen=True)
class Wait:
    """Sleep ``seconds`` before the next round of addresses."""

    seconds: float


Step = Open | Ask | Drop | Wait


@dataclass(frozen=True)
class Found:
    """What a search ends with: the connection just opened is the one. ``ping``: its PING
    answer when the search was asked for it (None otherwise)."""

    address: Address
    hello: dict[str, Any]
    principal: str | None
    ping: dict[str, Any] | None


SearchSteps = Generator[Step, Any, Found]


def login_steps(address: Address, credentials: Credentials | None, request_timeout: float,
                connect_timeout: float) -> Generator[Ask, Any, tuple[dict[str, Any], str | None]]:
    """HELLO, and the log-in when there are ``credentials``; returns (HELLO's answer, the
    principal or None). An FMQ server answers HELLO at once: a peer silent for
    ``connect_timeout`` is taken for another kind of server (the log-in's steps may take
    longer: a slowed-down log-in)."""
    steps = handshake_steps(credentials)
    hello_timeout = min(request_timeout, connect_timeout)
    op, fields = next(steps)
    try:
        answer = yield Ask(op, fields, hello_timeout)
    except RequestTimeout:
        raise no_handshake(address, hello_timeout) from None
    except ConnectionLost as exc:
        if type(exc) not in (ConnectionLost, NotSent):
            raise
        raise closed_before_handshake(address) from None
    try:
        while True:
            op, fields = steps.send(answer)
            answer = yield Ask(op, fields, request_timeout)
    except StopIteration as done:
        return done.value


def search_steps(finder: Finder, credentials: Credentials | None, request_timeout: float,
                 connect_timeout: float, backoff: Callable[[int], float],
                 ping: bool = False) -> SearchSteps:
    """The steps to a connection to the node ``finder`` looks for, logged in when there
    are ``credentials`` (and asked PING when ``ping``). When no server answers at all:
    ConnectionLost at once. When some answer but none is the primary (nor names one that
    answers): rounds with back-off for up to ``request_timeout`` seconds, then
    PrimaryNotFound (both retriable). A non-retriable handshake error ends the search."""
    finder.begin(request_timeout, backoff)
    while True:
        while (address := finder.next_address()) is not None:
            try:
                yield Open(address)
            except ConnectionLost as exc:
                finder.unreachable(address, exc)
                continue
            try:
                hello, principal = yield from login_steps(address, credentials,
                                                          request_timeout, connect_timeout)
                if finder.accepts(address, hello):
                    answer = (yield Ask(Op.PING, {}, request_timeout)) if ping else None
                    return Found(address, hello, principal, answer)
            except FMQError as exc:
                yield Drop()
                if not exc.retriable:
                    raise
                finder.failed(exc)
                continue
            yield Drop()
        yield Wait(finder.pause())


class Search:
    """Runs :func:`search_steps` for a driver: :meth:`advance` takes the outcome of the
    step last performed (its answer, or the FMQError it raised) and gives the next step,
    or None once :attr:`found` is set."""

    def __init__(self, steps: SearchSteps) -> None:
        self._steps = steps
        self._started = False
        self.found: Found | None = None

    def advance(self, outcome: Any = None) -> Step | None:
        try:
            if not self._started:
                self._started = True
                return next(self._steps)
            if isinstance(outcome, BaseException):
                return self._steps.throw(outcome)
            return self._steps.send(outcome)
        except StopIteration as done:
            self.found = done.value
            return None


class Link:
    """One broker group's connection: the :class:`Finder` that looks for its node, the
    connection found (either kind: the threaded or the asyncio one) and how many were
    opened so far."""

    def __init__(self, finder: Finder) -> None:
        self.finder = finder
        self.conn: Any = None
        #: Connections opened so far (part of generated transaction ids).
        self.opened = 0

    def usable(self) -> Any:
        """The connection, while it is open and no NotPrimary came back on it; else None."""
        conn = self.conn
        if conn is not None and not conn.closed and conn.redirect is None:
            return conn
        return None

    def claim(self, client_closed: bool, what: str) -> tuple[Any, Any]:
        """Under the client's connection lock: (the usable connection, None), or (None,
        the connection that will no longer do, for the caller to close, or None) when a
        new one must be found; the primary a NotPrimary on the old one named is learnt.
        Raises BrokerClosed when the client (``what``: "client", "producer") is closed."""
        if client_closed:
            raise BrokerClosed(f"this {what} is closed; create a new one")
        conn = self.usable()
        if conn is not None:
            return conn, None
        conn, self.conn = self.conn, None
        if conn is not None and conn.redirect is not None:
            self.finder.learn(conn.redirect)
        return None, conn

    def attach(self, conn: Any) -> None:
        self.conn = conn
        self.opened += 1


class LinkPool:
    """A client's links, one per broker group it talks to (keyed by the link's name:
    :data:`OWN_LINK` or :func:`link_of` a broker group)."""

    def __init__(self, finders: dict[str, Finder]) -> None:
        self._links = {link: Link(finder) for link, finder in finders.items()}
        self._lock = threading.Lock()  # links are added by whichever thread reads a route

    @classmethod
    def single(cls, finder: Finder) -> LinkPool:
        """The pool of a client of one broker group."""
        return cls({OWN_LINK: finder})

    def __getitem__(self, link: str) -> Link:
        return self._links[link]

    def names(self) -> list[str]:
        """The links' names, the client's own first."""
        return list(self._links)

    def get(self, link: str) -> Link | None:
        return self._links.get(link)

    def seed(self, name: str, primary: Address) -> Link:
        """The link ``name``, made on first use, looking for its broker group's node at
        ``primary`` (a routed topic's group, docs/cluster.md); a route naming a new
        primary (a fail-over) moves the search there."""
        with self._lock:
            link = self._links.get(name)
            if link is None:
                link = self._links[name] = Link(Finder([primary]))
            elif link.finder.servers != [primary]:
                link.finder.servers = [primary]
                link.finder.learn(f"{primary[0]}:{primary[1]}")
            return link

    def take_all(self) -> list[Any]:
        """Every open connection, taken out of its link (closing the client)."""
        links = list(self._links.values())
        conns = [link.conn for link in links if link.conn is not None]
        for link in links:
            link.conn = None
        return conns


#: The jitter's own generator: FMQ's retries never move the process's global ``random``
#: state, which an application may have seeded for its own reproducible sequence.
_JITTER = random.Random()


def backoff_delay(attempt: int, initial: float, maximum: float) -> float:
    """Seconds to wait before retry ``attempt`` (0 first): doubling from ``initial`` up to
    ``maximum``, with jitter so that reconnecting clients do not stampede."""
    base = min(maximum, initial * (2 ** attempt))
    return base * (0.5 + _JITTER.random() / 2)


class PooledClient:
    """What a client of one broker group reads of its :class:`LinkPool`."""

    links: LinkPool

    def _connect_options(self, *, tls: TLSSetting, user: str | None, password: str | None,
                         password_file: str | None, request_timeout: float,
                         connect_timeout: float, retries: int | None,
                         delivery_timeout: float | None, backoff_initial: float,
                         backoff_max: float, max_in_flight: int) -> None:
        """What every connection of this client uses (:class:`fmq.client.Client` says
        what each option means)."""
        self.tls_context = client_context(tls)
        self.credentials = resolve_credentials(user, password, password_file)
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        check_retry_options(retries, delivery_timeout)
        self.retries = retries
        self.delivery_timeout = delivery_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.max_in_flight = max_in_flight

    def _backoff(self, attempt: int) -> float:
        return backoff_delay(attempt, self.backoff_initial, self.backoff_max)

    def attempts(self, retries: int | None = None, started: float | None = None) -> Attempts:
        """The retry budget of one request: this client's ``delivery_timeout`` and
        ``retries`` (``retries`` given here replaces the client's count)."""
        return Attempts(self.retries if retries is None else retries, self.delivery_timeout,
                        self._backoff, started)

    @property
    def finder(self) -> Finder:
        """Which node this client talks to, and what it learnt of the primary."""
        return self.links[OWN_LINK].finder

    @property
    def _conn(self) -> Any:
        """The current connection (None: none yet, or closed)."""
        return self.links[OWN_LINK].conn
