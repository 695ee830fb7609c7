"""A producer's view of its topics' routes (docs/cluster.md, docs/client.md "Routing"):
which broker group and queue each message goes to. No I/O here: the threaded and the
asyncio producer ask ROUTE themselves and hand the answer to :class:`RouteTable`.

* A route of a node outside a cluster (``cluster`` "", or a server too old to know ROUTE)
  is a **single** route: the producer sends as it always did, to its one group, and the
  server picks the queue (its key hash or round robin), so nothing changes there.
* In a cluster, the producer picks the queue: an unkeyed message goes round robin over the
  writable queues of the groups that have a primary and are not in a back-off; a keyed one
  to :func:`~fmq.topic_route.queue_for_key` (the one key rule the brokers share); a
  message naming a queue to that queue (``queue_id`` a global index, or a group's local id
  when the group is named).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fmq.errors import FMQError, InvalidArgument, ProtocolError, RouteConflict
from fmq.topic_route import (
    BrokerGroup,
    QueueRef,
    RouteEntry,
    TopicRoute,
    index_of,
    key_slot,
    queue_at,
    queue_for_key,
    writable_queues,
)

#: Seconds between two reads of a topic's route when nothing asks for one sooner.
DEFAULT_ROUTE_REFRESH_S = 30.0
#: The shortest gap between two reads of one topic's route forced by NotHosted: a burst of
#: refusals (a whole batch in flight) reads it once.
MIN_REFRESH_GAP_S = 0.005
#: How long a group that could not be reached is left out of unkeyed sends.
GROUP_BACKOFF_S = 1.0


@dataclass(frozen=True)
class Route:
    """A topic's route as ROUTE answered it: the cluster's name ("" outside a cluster), the
    route, and each group's primary as the answering node knew it."""

    cluster: str
    route: TopicRoute
    groups: dict[str, BrokerGroup] = field(default_factory=dict)

    @property
    def single(self) -> bool:
        """A node outside a cluster: sends take today's path (the server picks the queue)."""
        return not self.cluster

    @property
    def version(self) -> int:
        return self.route.version

    def group_name(self) -> str:
        """The one group of a single route ("" when the server did not say)."""
        return self.route.entries[0].group if self.route.entries else ""


def parse_route(text: str) -> Route:
    """ROUTE's JSON answer (docs/protocol.md, the ROUTE row) as a :class:`Route`."""
    try:
        d = json.loads(text)
        entries = tuple(RouteEntry(g["group"], int(g["queues"]), g["permission"],
                                   int(g["base"])) for g in d["groups"])
        groups = {g["group"]: BrokerGroup(g["group"], g.get("primary") or "",
                                          int(g.get("epoch", 0)),
                                          bool(g.get("open_for_writes", True)))
                  for g in d["groups"]}
        next_index = max((e.base + e.queues for e in entries), default=0)
        route = TopicRoute(d["topic"], entries, next_index, int(d["version"]))
        return Route(d["cluster"], route, groups)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"the server's ROUTE answer is not valid ({exc}); is the "
                            f"client older than the server?") from None


def old_server_route(topic: str) -> Route:
    """The route of a server that does not know ROUTE: its one group, today's path."""
    return Route("", TopicRoute(topic, ()))


def knows_no_route(error: FMQError) -> bool:
    """Whether ``error`` is an older server's answer to ROUTE (it has no such request)."""
    return isinstance(error, ProtocolError) and "unknown opcode 65" in str(error)


# -------------------------------------------------------------------- the choices

def unkeyed_queue(route: Route, turn: int, skipped: Iterable[str] = ()) -> QueueRef:
    """The queue of an unkeyed message, the ``turn``-th of its topic: round robin over the
    writable queues of the groups that have a primary, are open for writes and are not
    ``skipped`` (in a back-off). When every writable group is so, over all writable queues
    (the send then waits for a primary within the delivery deadline rather than fail)."""
    skip = set(skipped)
    queues = [q for q in writable_queues(route.route, route.groups) if q.group not in skip]
    if not queues:
        queues = writable_queues(route.route)
    if not queues:
        raise RouteConflict(route.route.topic, "no broker group takes writes for it (every "
                                               "group is drained); expand it to a group first")
    return queues[turn % len(queues)]


def keyed_queue(route: Route, key: str) -> QueueRef:
    """The queue of a keyed message: the key's hash over the route's writable queues."""
    return queue_for_key(route.route, key)


def named_queue(route: Route, queue_id: int, group: str | None = None) -> QueueRef:
    """The queue a message names: ``queue_id`` in ``group`` when a group is named, else the
    queue with global index ``queue_id``."""
    if group is None:
        return queue_at(route.route, queue_id)
    ref = QueueRef(group, queue_id)
    index_of(route.route, ref)  # raises InvalidArgument when the route has no such queue
    return ref


def choose_queue(route: Route, key: str | None, queue_id: int | None, group: str | None,
                 turn: int, skipped: Iterable[str] = ()) -> QueueRef:
    """The queue one message goes to in a cluster (see the module docstring)."""
    if queue_id is not None:
        return named_queue(route, queue_id, group)
    if group is not None:
        raise InvalidArgument("a message that names a broker group must name its queue_id "
                              "there too")
    if key:
        return keyed_queue(route, key)
    return unkeyed_queue(route, turn, skipped)


def group_queue(route: Route, group: str, key: str | None, queue_id: int | None,
                turn: int) -> QueueRef | None:
    """The queue of a transaction's message confined to ``group``: its named queue (local
    id) if given, else its key's hash (or round robin) over ``group``'s writable queues of
    the topic. None when the topic has no writable queue in ``group``."""
    entry = route.route.entry(group)
    if entry is None or not entry.writable:
        return None
    if queue_id is not None:
        return named_queue(route, queue_id, group)
    slot = key_slot(key, entry.queues) if key else turn % entry.queues
    return QueueRef(group, slot)


# -------------------------------------------------------------------- the table

def _lacks_primary(route: Route) -> bool:
    """A group of the (cluster) route has no primary now."""
    if route.single:
        return False
    return any(not (g := route.groups.get(e.group)) or not g.primary
               for e in route.route.entries if e.writable)


class RouteTable:
    """The routes a producer read, per topic, and when to read each again: at once after a
    NotHosted (at most once per ``min_gap_s``), every ``refresh_s`` seconds (``backoff_s``
    while one of its groups has no primary), and when a group's primary could not be
    reached. Thread-safe; no I/O (the caller asks ROUTE)."""

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
        self._backoff: dict[str, float] = {}  # group -> left out until
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
            # A group of the route without a primary (an election under way) is left
            # out of unkeyed sends until a read names one: read again after a back-off,
            # not a whole refresh period later.
            period = self.backoff_s if _lacks_primary(route) else self.refresh_s
            if now - read_at >= period:
                return None
            return route

    def topics_in(self, group: str) -> list[str]:
        """The topics whose held route has queues in ``group``."""
        with self._lock:
            return [t for t, (route, _) in self._routes.items() if group in route.groups]

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

    def unreachable(self, group: str, topic: str | None = None) -> None:
        """``group``'s primary could not be reached: leave it out of unkeyed sends for a
        back-off and read the route again (it may name a new primary)."""
        with self._lock:
            self._backoff[group] = self._clock() + self.backoff_s
            if topic is not None:
                self._stale.add(topic)
            else:
                self._stale.update(self._routes)

    def skipped(self) -> set[str]:
        """The groups in a back-off now."""
        now = self._clock()
        with self._lock:
            return {g for g, until in self._backoff.items() if until > now}

    def turn(self, topic: str) -> int:
        """The next round-robin turn of ``topic``'s unkeyed messages."""
        with self._lock:
            n = self._turns.get(topic, 0)
            self._turns[topic] = n + 1
            return n


class SpansGroups(InvalidArgument):
    """Messages that must be stored together (one batch, one transaction) would go to more
    than one broker group; nothing was sent."""


def place_in_group(routes: list[Route], group: str, keys: list[str | None],
                   queue_ids: list[int | None], turn: int) -> list[QueueRef]:
    """The queues of messages confined to ``group`` (a transaction's, or a batch's after its
    group is chosen): a named queue is a local queue id there, a key hashes over the
    group's queues of its topic, the rest go round robin from ``turn``. SpansGroups when a
    topic has no writable queue in ``group``."""
    refs = []
    for i, (route, key, queue_id) in enumerate(zip(routes, keys, queue_ids, strict=True)):
        ref = group_queue(route, group, key, queue_id, turn + i)
        if ref is None:
            raise SpansGroups(
                f"topic {route.route.topic} has no writable queue in broker group {group}, "
                f"where these messages are stored together (its writable groups: "
                f"{', '.join(e.group for e in route.route.entries if e.writable) or 'none'}); "
                f"send them in separate batches or transactions, one per group")
        refs.append(ref)
    return refs


def place_batch(routes: list[Route], keys: list[str | None], queue_ids: list[int | None],
                group: str | None, turn: int, skipped: Iterable[str] = ()) -> list[QueueRef]:
    """The queues of one batch's messages, all in one broker group (a batch is stored all
    or none, by one group). Keyed and queue-naming messages keep the queue they would have
    alone; the unkeyed ones go to the group those name, else to the group of the unkeyed
    choice of ``turn``. SpansGroups when they name several groups."""
    fixed = {i: choose_queue(r, k, q, group, turn)
             for i, (r, k, q) in enumerate(zip(routes, keys, queue_ids, strict=True))
             if q is not None or k}
    groups = sorted({ref.group for ref in fixed.values()} | ({group} if group else set()))
    if len(groups) > 1:
        raise SpansGroups(f"this batch's keys and queues lie in broker groups "
                          f"{', '.join(groups)}, and a batch is stored by one group, all or "
                          f"none; send one batch per group (or use send_async)")
    chosen = groups[0] if groups else unkeyed_queue(routes[0], turn, skipped).group
    rest = [i for i in range(len(routes)) if i not in fixed]
    loose = dict(zip(rest, place_in_group([routes[i] for i in rest], chosen, [None] * len(rest),
                                          [None] * len(rest), turn), strict=True))
    return [fixed[i] if i in fixed else loose[i] for i in range(len(routes))]
