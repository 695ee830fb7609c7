"""Finding the node a client needs among its servers: the primary (writes, transactions,
consumer groups, offsets), or any node (a consumer's follower reads).

Every node says who it is in HELLO's answer (its role, and the primary's address as it
knows it), and a follower refuses a write with NotPrimary naming the primary.
:class:`Finder` keeps what a client learnt from both and decides which address to try
next, when to wait and when to give up; the threaded and the asyncio client drive it with
their own I/O (blocking or awaiting), and send :func:`handshake_steps` first on every new
connection (docs/client.md, "Several servers").
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Generator
from typing import Any

from fmq.errors import ConnectionLost, FMQError, InvalidArgument, PrimaryNotFound
from fmq.protocol import Op
from fmq.protocol.schema import HELLO_NODE_VERSION
from fmq.version import __version__

from .auth import Credentials, scram_steps
from .connection import parse_servers

#: The node a client talks to: the primary, or the first node that answers.
PRIMARY = "primary"
ANY = "any"
NODES = (PRIMARY, ANY)

#: The longest wait between two rounds of a search: nodes that answer but name no primary
#: mean an election is under way, which ends within about the lease TTL; the new primary
#: is found at most this long after it serves (a round is one HELLO per node).
MAX_ROUND_PAUSE_S = 0.25

Address = tuple[str, int]
HandshakeSteps = Generator[tuple[Op, dict[str, Any]], dict[str, Any],
                           tuple[dict[str, Any], str | None]]


def handshake_steps(credentials: Credentials | None) -> HandshakeSteps:
    """The first requests of a connection: HELLO (asking for the node's role), then the
    log-in when there are ``credentials``. Yields each request and is sent its answer;
    returns (HELLO's answer, the principal or None)."""
    hello = yield Op.HELLO, {"protocol_version": HELLO_NODE_VERSION,
                             "client": f"fmq-python/{__version__}"}
    principal = None
    if credentials is not None:
        principal = (yield from scram_steps(hello, credentials)) or None
    return hello, principal


def address_of(text: str | None) -> Address | None:
    """The address a node named as its primary; None when it named none ("")."""
    if not text:
        return None
    try:
        return parse_servers(text)[0]
    except InvalidArgument:
        return None


def show(address: Address) -> str:
    return f"{address[0]}:{address[1]}"


class Finder:
    """Which address a client tries next, whether a node that answered will do, and how
    long to keep looking.

    One search (:meth:`begin`) is rounds of :meth:`next_address` until it gives None, then
    :meth:`pause`; a round tries the primary last named first, then ``preferred``, then each
    of ``servers`` once (from the one after the last used, so a dead server is not always
    first), and a primary named during the round right after the node that named it. The
    client reports each attempt: :meth:`unreachable`, :meth:`failed` or :meth:`accepts`."""

    def __init__(self, servers: list[Address], node: str = PRIMARY,
                 preferred: Address | None = None) -> None:
        if node not in NODES:
            raise InvalidArgument(f"node must be one of {', '.join(NODES)}, not {node!r}")
        self.servers = servers
        self.node = node
        self.preferred = preferred
        #: The primary as a node last named it (None: not known).
        self.primary: Address | None = None
        self._next = 0
        self._queue: deque[Address] = deque()
        self._tried: set[Address] = set()
        #: What the nodes answered in the current search, for PrimaryNotFound's message.
        self._said: list[str] = []
        #: The current search: when it gives up, its back-off, rounds so far, and the
        #: current round's failures and whether any node in it answered HELLO.
        self._deadline = 0.0
        self._backoff: Callable[[int], float] = lambda rounds: 0.0
        self._rounds = 0
        self._errors: list[str] = []
        self._answered = False

    def begin(self, timeout: float, backoff: Callable[[int], float]) -> None:
        """Start a search that gives up after ``timeout`` seconds when nodes answer but
        none will do, waiting ``backoff(rounds)`` seconds between rounds."""
        self._deadline = time.monotonic() + timeout
        self._backoff = backoff
        self._rounds = 0
        self._said = []
        self._start_round()

    def _start_round(self) -> None:
        self._tried = set()
        self._errors = []
        self._answered = False
        order: list[Address] = []
        if self.primary is not None:  # (a client of any node learns it from NotPrimary)
            order.append(self.primary)
        if self.preferred is not None:
            order.append(self.preferred)
        n = len(self.servers)
        order += [self.servers[(self._next + i) % n] for i in range(n)]
        self._queue = deque(dict.fromkeys(order))

    def next_address(self) -> Address | None:
        """The address to try next; None: the round is over (then :meth:`pause`)."""
        while self._queue:
            address = self._queue.popleft()
            if address not in self._tried:
                self._tried.add(address)
                return address
        return None

    def accepts(self, address: Address, hello: dict[str, Any]) -> bool:
        """Whether the node at ``address``, which answered HELLO with ``hello``, is one
        this client talks to; a follower's answer names the primary to try next."""
        node = hello.get("node")
        # A server too old to say its role is taken at its word: a follower among them
        # still refuses writes with NotPrimary, which sends the client on.
        is_primary = node is None or node["role"] == "primary"
        if is_primary and self.node == PRIMARY:
            self.primary = address
        if not is_primary and self.node == PRIMARY:
            named = node["primary"] or "no primary (it does not know one now)"
            self._said.append(f"{show(address)} is a follower of {named}")
            self.learn(node["primary"])
        if is_primary or self.node == ANY:
            if address in self.servers:
                self._next = self.servers.index(address) + 1
            return True
        self._answered = True
        return False

    def learn(self, primary: str | None) -> None:
        """A node named ``primary`` as the primary (in HELLO or NotPrimary; "" or None: it
        does not know one): try it next."""
        address = address_of(primary)
        if address is None:
            return
        self.primary = address
        if address not in self._tried:
            self._queue.appendleft(address)

    def unreachable(self, address: Address, error: ConnectionLost) -> None:
        """No connection to ``address``."""
        self._errors.append(str(error))
        if address == self.primary:
            self.primary = None  # ask the others again rather than insist on it

    def failed(self, error: FMQError) -> None:
        """A node was reached but its handshake failed with the retriable ``error``."""
        self._errors.append(str(error))

    def pause(self) -> float:
        """At the end of a round that found no node: the seconds to wait before the next
        round, which starts now. Raises ConnectionLost when no node answered in the round
        (nothing to wait for), PrimaryNotFound when the search's time is up."""
        if not self._answered:
            raise ConnectionLost("; ".join(self._errors))
        rest = self._deadline - time.monotonic()
        if rest <= 0:
            said = "; ".join(dict.fromkeys(self._said + self._errors))
            raise PrimaryNotFound(
                f"no primary among {', '.join(show(a) for a in self.servers)} ({said}); a "
                f"fail-over may be under way: retry later, or see `fmq replica status`")
        delay = min(rest, MAX_ROUND_PAUSE_S, self._backoff(self._rounds))
        self._rounds += 1
        self._start_round()
        return delay
