"""The routes a client read (docs/cluster.md, docs/client.md "Routing"): a topic's route as
ROUTE answers it (:class:`Route`) and the table of them, which says when each must be read
again (:class:`RouteTable`). No I/O here: the producers and the consumer ask ROUTE
themselves and hand the answer over.

A route of a node outside a cluster (``cluster`` "", or a server too old to know ROUTE) is
a **single** route: the client talks to the servers it was given, as it always did.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fmq.errors import FMQError, InvalidArgument, ProtocolError
from fmq.topic_route import BrokerGroup, RouteEntry, TopicRoute

#: Seconds between two reads of a topic's route when nothing asks for one sooner.
DEFAULT_ROUTE_REFRESH_S = 30.0
#: The shortest gap between two reads of one topic's route forced by NotHosted: a burst of
#: refusals (a whole batch in flight) reads it once.
MIN_REFRESH_GAP_S = 0.005
#: How long a broker group that could not be reached is left out of unkeyed sends.
GROUP_BACKOFF_S = 1.0


@dataclass(frozen=True)
class Route:
    """A topic's route as ROUTE answered it: the cluster's name ("" outside a cluster), the
    route, and each broker group's primary as the answering node knew it."""

    cluster: str
    route: TopicRoute
    broker_groups: dict[str, BrokerGroup] = field(default_factory=dict)

    @property
    def single(self) -> bool:
        """A node outside a cluster: sends take today's path (the server picks the queue)."""
        return not self.cluster

    @property
    def version(self) -> int:
        return self.route.version

    def broker_group_name(self) -> str:
        """The one broker group of a single route ("" when the server did not say)."""
        return self.route.entries[0].group if self.route.entries else ""


def parse_route(text: str) -> Route:
    """ROUTE's JSON answer (docs/protocol.md, the ROUTE row) as a :class:`Route`."""
    try:
        d = json.loads(text)
        entries = tuple(RouteEntry(g["group"], int(g["queues"]), g["permission"],
                                   int(g["base"])) for g in d["groups"])
        broker_groups = {g["group"]: BrokerGroup(g["group"], g.get("primary") or "",
                                                 int(g.get("epoch", 0)),
                                                 bool(g.get("open_for_writes", True)))
                         for g in d["groups"]}
        next_index = max((e.base + e.queues for e in entries), default=0)
        route = TopicRoute(d["topic"], entries, next_index, int(d["version"]))
        return Route(d["cluster"], route, broker_groups)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"the server's ROUTE answer is not valid ({exc}); is the "
                            f"client older than the server?") from None


def old_server_route(topic: str) -> Route:
    """The route of a server that does not know ROUTE: its one broker group, today's path."""
    return Route("", TopicRoute(topic, ()))


def knows_no_route(error: FMQError) -> bool:
    """Whether ``error`` is an older server's answer to ROUTE (it has no such request)."""
    return isinstance(error, ProtocolError) and "unknown opcode 65" in str(error)


# -------------------------------------------------------------------- the table

def _lacks_primary(route: Route) -> bool:
    """A broker group of the (cluster) route has no primary now."""
    if route.single:
        return False
    return any(not (g := route.broker_groups.get(e.group)) or not g.primary
               for e in route.route.entries if e.writable)


class RouteTable:
    """The routes a producer read, per topic, and when to read each again: at once after a
    NotHosted (at most once per ``min_gap_s``), every ``refresh_s`` seconds (``backoff_s``
    while one of its broker groups has no primary), and when a broker group's primary could
    not be reached. Thread-safe; no I/O (the caller asks ROUTE)."""

    def __init__(self, refresh_s: float = DEFAULT_ROUTE_REFRESH_S,
                 min_gap_s: float = MIN_REFRESH_GAP_S, backoff_s: float = GROUP_BACKOFF_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not refresh_s > 0:
            raise InvalidArgument(f"route_refresh_s must be a positive number of seconds, "
                                  f"not {refresh_s!r}")
        self.refresh_s = refresh_s
        self.min_gap_s = min_gap_s
        self.backoff_s = backoff_s
        self._clock = clock
        self._lock = threading.Lock()
        self._routes: dict[str, tuple[Route, float]] = {}  # topic -> (route, read at)
        self._stale: set[str] = set()
        self._turns: dict[str, int] = {}
        self._backoff: dict[str, float] = {}  # broker group -> left out until
        #: topic -> when a read of its route without retries last failed (an outage).
        self._unreadable: dict[str, float] = {}
        #: NotHosted refusals seen so far (each made a topic's route stale).
        self.refusals = 0

    def current(self, topic: str) -> Route | None:
        """The topic's route while it needs no new read; None: read it (ROUTE) first."""
        now = self._clock()
        with self._lock:
            held = self._routes.get(topic)
            if held is None:
                return None
            route, read_at = held
            if topic in self._stale:
                if now - read_at >= self.min_gap_s:
                    return None
                return route
            # A broker group of the route without a primary (an election under way) is left
            # out of unkeyed sends until a read names one: read again after a back-off,
            # not a whole refresh period later.
            period = self.backoff_s if _lacks_primary(route) else self.refresh_s
            if now - read_at >= period:
                return None
            return route

    def topics_in(self, broker_group: str) -> list[str]:
        """The topics whose held route has queues in ``broker_group``."""
        with self._lock:
            return [t for t, (route, _) in self._routes.items()
                    if broker_group in route.broker_groups]

    def held(self, topic: str) -> Route | None:
        """The topic's route last read, however old (None: never read)."""
        with self._lock:
            held = self._routes.get(topic)
            return None if held is None else held[0]

    def store(self, topic: str, route: Route) -> Route:
        """Keep ``route`` as read just now; an older version than the one held is kept
        out (a node that lags its cluster's etcd), only its read time counts."""
        now = self._clock()
        with self._lock:
            held = self._routes.get(topic)
            if held is not None and not held[0].single and route.version < held[0].version:
                route = held[0]
            self._routes[topic] = (route, now)
            self._stale.discard(topic)
            return route

    def unreadable_for(self, topic: str, within_s: float) -> bool:
        """A read of the topic's route failed less than ``within_s`` ago: the sends queued
        behind it (``send_async``) do not each try a connection of their own in an
        outage."""
        with self._lock:
            failed_at = self._unreadable.get(topic)
        return failed_at is not None and self._clock() - failed_at < within_s

    def read_failed(self, topic: str) -> None:
        """Reading the topic's route just failed (see :meth:`unreadable_for`)."""
        with self._lock:
            self._unreadable[topic] = self._clock()

    def read_worked(self, topic: str) -> None:
        """Reading the topic's route just worked: the next failure starts a new wait."""
        with self._lock:
            self._unreadable.pop(topic, None)

    def not_hosted(self, topic: str) -> None:
        """A NotHosted came back for ``topic``: read its route again before the next send."""
        with self._lock:
            self._stale.add(topic)
            self.refusals += 1

    def unreachable(self, broker_group: str, topic: str | None = None) -> None:
        """``broker_group``'s primary could not be reached: leave it out of unkeyed sends
        for a back-off and read the route again (it may name a new primary)."""
        with self._lock:
            self._backoff[broker_group] = self._clock() + self.backoff_s
            if topic is not None:
                self._stale.add(topic)
            else:
                self._stale.update(self._routes)

    def skipped(self) -> set[str]:
        """The broker groups in a back-off now."""
        now = self._clock()
        with self._lock:
            return {g for g, until in self._backoff.items() if until > now}

    def turn(self, topic: str) -> int:
        """The next round-robin turn of ``topic``'s unkeyed messages."""
        with self._lock:
            n = self._turns.get(topic, 0)
            self._turns[topic] = n + 1
            return n
