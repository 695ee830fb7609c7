"""A topic's route over a cluster's broker groups (docs/cluster.md): which groups hold its
queues, how many each, and whether each takes writes. Pure values and functions, shared by
the etcd store, the brokers and (later) the clients.

* A route is an ordered list of entries (group, number of queues, permission ``rw`` or
  ``ro``). A queue is named by (group, local queue id). Each entry owns the global indices
  ``base .. base + queues - 1``; ``base`` is fixed when the group is added and a removed
  group's indices are never given out again, so a queue's global index never changes while
  it is routed (unlike a list sorted by broker name, where adding a group renumbers the
  queues after it).
* ``version`` is the etcd revision of the route's key: every change is a compare-and-swap
  on it, so a larger version is always a later route.
* Keyed sends hash over the route's writable queues in global order
  (:func:`queue_for_key`). **Expanding a topic, draining a group or removing one remaps
  keys**, as adding partitions does in Kafka: a key's messages before and after such a
  change may be in different queues, so per-key order holds between changes, not across
  them. A route of one group hashes a key to the queue a single broker picks today.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from fmq import native
from fmq.errors import InvalidArgument, RouteConflict, RouteHasLag, UnknownBrokerGroup
from fmq.message import INTERNAL_TOPIC_PREFIX, check_topic

try:
    from crc32c import crc32c as _hardware_crc32c
except ImportError:  # pragma: no cover - crcmod computes the same function, slower
    _hardware_crc32c = None
if _hardware_crc32c is None or native.no_extensions():  # as fmq.log.record chooses
    import crcmod.predefined

    _crc32c = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
else:
    _crc32c = _hardware_crc32c

READ_WRITE = "rw"
READ_ONLY = "ro"
PERMISSIONS = (READ_WRITE, READ_ONLY)
#: Queues one broker group holds of one topic (queue ids are u16 on the wire).
MAX_QUEUES_PER_GROUP = 65_535
#: Queues one route holds in all; global indices stay below ``MAX_GLOBAL_INDEX``.
MAX_ROUTE_QUEUES = 65_535
MAX_GLOBAL_INDEX = (1 << 31) - 1
#: A broker group's name: it is part of etcd keys (``/fmq/<group>/...``) and of log lines.
_GROUP_RE = re.compile(r"[A-Za-z0-9_.:-]{1,127}")
FORMAT = 1


def check_group_name(broker_group: object) -> str:
    """``broker_group`` if it is a valid broker-group name, else InvalidArgument."""
    if not isinstance(broker_group, str) or not _GROUP_RE.fullmatch(broker_group):
        raise InvalidArgument(f"broker group name {broker_group!r} must be 1..127 characters of "
                              f"letters, digits and _ . : -")
    return broker_group


def check_routable_topic(topic: object) -> str:
    """``topic`` if a route may name it: a valid name, not one of FMQ's own topics."""
    check_topic(topic)  # type: ignore[arg-type]
    assert isinstance(topic, str)
    if topic.startswith(INTERNAL_TOPIC_PREFIX):
        raise InvalidArgument(f"topic {topic!r} is one of FMQ's own (it starts with "
                              f"{INTERNAL_TOPIC_PREFIX!r}): each broker group keeps its own, "
                              f"they are never routed; pick another name")
    return topic


def check_queue_count(queues: object) -> int:
    if isinstance(queues, bool) or not isinstance(queues, int) \
            or not 1 <= queues <= MAX_QUEUES_PER_GROUP:
        raise InvalidArgument(f"queues per broker group must be 1..{MAX_QUEUES_PER_GROUP}, "
                              f"not {queues!r}")
    return queues


@dataclass(frozen=True)
class QueueRef:
    """A queue: its broker group and its queue id there."""

    group: str
    queue_id: int


@dataclass(frozen=True)
class RouteEntry:
    """One broker group's part of a route: global indices ``base .. base + queues - 1``."""

    group: str
    queues: int
    permission: str = READ_WRITE
    base: int = 0

    @property
    def writable(self) -> bool:
        return self.permission == READ_WRITE


@dataclass(frozen=True)
class BrokerGroup:
    """A broker group of a cluster: its name, its primary's client address as the group's
    leader key has it ("" while it has none), that primary's epoch, and whether the operator
    lets it take writes."""

    name: str
    primary: str = ""
    epoch: int = 0
    open_for_writes: bool = True

    @property
    def writable(self) -> bool:
        return self.open_for_writes and bool(self.primary)


@dataclass(frozen=True)
class TopicRoute:
    topic: str
    entries: tuple[RouteEntry, ...]
    #: The first global index a group added next gets (removed groups' indices stay used).
    next_index: int = 0
    #: The etcd revision of the route's key; 0 for a route not stored yet.
    version: int = 0

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(e.group for e in self.entries)

    def entry(self, broker_group: str) -> RouteEntry | None:
        return next((e for e in self.entries if e.group == broker_group), None)

    def queues(self) -> list[tuple[int, QueueRef]]:
        """(global index, queue) of every routed queue, in global order."""
        return [(e.base + q, QueueRef(e.group, q)) for e in self.entries for q in range(e.queues)]

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "topic": self.topic, "next_index": self.next_index,
                           "groups": [{"group": e.group, "queues": e.queues,
                                       "permission": e.permission, "base": e.base}
                                      for e in self.entries]},
                          sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes, version: int = 0) -> TopicRoute:
        """The route ``text`` holds, checked whole (InvalidArgument naming what is wrong)."""
        try:
            d = json.loads(text)
            if d.get("format") != FORMAT:
                raise ValueError(f"format {d.get('format')!r}, this FMQ reads {FORMAT}")
            route = cls(topic=d["topic"], next_index=int(d["next_index"]), version=version,
                        entries=tuple(RouteEntry(g["group"], g["queues"], g["permission"],
                                                 g["base"]) for g in d["groups"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidArgument(f"a stored route is not valid: {exc}") from None
        check_route(route)
        return route


def check_route(route: TopicRoute) -> None:
    """Every rule a route keeps: a routable topic, valid and distinct groups, queue counts
    in range, index ranges that do not overlap and lie below ``next_index``."""
    check_routable_topic(route.topic)
    if not route.entries:
        raise InvalidArgument(f"the route of topic {route.topic} names no broker group")
    seen: set[str] = set()
    ranges = []
    for e in route.entries:
        check_group_name(e.group)
        check_queue_count(e.queues)
        if e.group in seen:
            raise InvalidArgument(f"the route of topic {route.topic} names group {e.group} "
                                  f"twice")
        if e.permission not in PERMISSIONS:
            raise InvalidArgument(f"permission {e.permission!r} must be one of {PERMISSIONS}")
        if isinstance(e.base, bool) or not isinstance(e.base, int) or e.base < 0:
            raise InvalidArgument(f"a route entry's base must be an integer >= 0, not "
                                  f"{e.base!r}")
        seen.add(e.group)
        ranges.append((e.base, e.base + e.queues))
    ranges.sort()
    if any(a_end > b_start for (_, a_end), (b_start, _) in zip(ranges, ranges[1:], strict=False)):
        raise InvalidArgument(f"the route of topic {route.topic} gives a global index to two "
                              f"queues")
    if not ranges[-1][1] <= route.next_index <= MAX_GLOBAL_INDEX:
        raise InvalidArgument(f"the route of topic {route.topic} has next_index "
                              f"{route.next_index} below its queues or past "
                              f"{MAX_GLOBAL_INDEX}")
    if sum(e.queues for e in route.entries) > MAX_ROUTE_QUEUES:
        raise InvalidArgument(f"a route holds at most {MAX_ROUTE_QUEUES} queues")


# -------------------------------------------------------------------- indices and keys

def queue_at(route: TopicRoute, index: int) -> QueueRef:
    """The queue with global ``index`` (UnknownQueue-like InvalidArgument when none)."""
    for e in route.entries:
        if e.base <= index < e.base + e.queues:
            return QueueRef(e.group, index - e.base)
    raise InvalidArgument(f"topic {route.topic} has no queue with global index {index} "
                          f"(route version {route.version})")


def index_of(route: TopicRoute, queue: QueueRef) -> int:
    """The global index of ``queue`` in ``route``."""
    e = route.entry(queue.group)
    if e is None or not 0 <= queue.queue_id < e.queues:
        raise InvalidArgument(f"topic {route.topic} has no queue {queue.queue_id} in broker "
                              f"group {queue.group} (route version {route.version})")
    return e.base + queue.queue_id


def writable_queues(route: TopicRoute,
                    groups: Mapping[str, BrokerGroup] | None = None) -> list[QueueRef]:
    """The queues of the route's ``rw`` groups in global order; with ``groups``, only those
    of groups that take writes now (a primary, not closed by the operator)."""
    return [q for e in sorted(route.entries, key=lambda e: e.base) if e.writable
            and (groups is None or (g := groups.get(e.group)) is not None and g.writable)
            for q in (QueueRef(e.group, i) for i in range(e.queues))]


def key_slot(key: str, slots: int) -> int:
    """Which of ``slots`` queues a key goes to: CRC-32C of its UTF-8 bytes modulo
    ``slots``. The one rule, for a broker's own queues and for a route's alike."""
    return _crc32c(key.encode()) % slots


def queue_for_key(route: TopicRoute, key: str) -> QueueRef:
    """The queue a keyed send goes to: CRC-32C of the key over the route's writable queues
    in global order. A group without a primary keeps its keys (they wait for its fail-over
    rather than move), so only a route change remaps keys."""
    queues = writable_queues(route)
    if not queues:
        raise RouteConflict(route.topic, "no broker group takes writes for it (every group "
                                         "is drained); expand it to a group first")
    return queues[key_slot(key, len(queues))]


# -------------------------------------------------------------------- changes

def _known(broker_group: str, known: Iterable[str] | None, cluster: str) -> None:
    check_group_name(broker_group)
    if known is not None:
        known = sorted(known)
        if broker_group not in known:
            raise UnknownBrokerGroup(broker_group, cluster, ", ".join(known) or "none yet")


def new_route(topic: str, broker_groups: Iterable[str], queues_per_group: int,
              known: Iterable[str] | None = None, cluster: str = "") -> TopicRoute:
    """A route of ``topic`` with ``queues_per_group`` writable queues in each of ``broker_groups``
    (in that order), every group one of ``known`` (the cluster's) when given."""
    check_routable_topic(topic)
    check_queue_count(queues_per_group)
    broker_groups = list(broker_groups)
    if not broker_groups:
        raise InvalidArgument(f"topic {topic} needs at least one broker group")
    known = None if known is None else list(known)
    for broker_group in broker_groups:
        _known(broker_group, known, cluster)
    if len(set(broker_groups)) != len(broker_groups):
        raise InvalidArgument(f"broker groups {broker_groups} name a group twice")
    entries = tuple(RouteEntry(g, queues_per_group, READ_WRITE, i * queues_per_group)
                    for i, g in enumerate(broker_groups))
    route = TopicRoute(topic, entries, next_index=len(broker_groups) * queues_per_group)
    check_route(route)
    return route


def expand(route: TopicRoute, broker_group: str, queues: int,
           known: Iterable[str] | None = None, cluster: str = "") -> TopicRoute:
    """``route`` with ``broker_group`` added last, ``queues`` writable queues at fresh indices."""
    _known(broker_group, None if known is None else list(known), cluster)
    check_queue_count(queues)
    if route.entry(broker_group) is not None:
        raise RouteConflict(route.topic, f"broker group {broker_group} holds queues of it already")
    if route.next_index + queues > MAX_GLOBAL_INDEX:
        raise RouteConflict(route.topic, "its global queue indices are used up; create the "
                                         "topic under a new name")
    new = replace(route, entries=(*route.entries,
                                  RouteEntry(broker_group, queues, READ_WRITE, route.next_index)),
                  next_index=route.next_index + queues)
    check_route(new)
    return new


def _with_permission(route: TopicRoute, broker_group: str, permission: str) -> TopicRoute:
    e = route.entry(broker_group)
    if e is None:
        raise RouteConflict(route.topic, f"broker group {broker_group} holds no queues of it "
                                         f"(its groups: {', '.join(route.groups)})")
    if e.permission == permission:
        return route  # already so: nothing to write
    return replace(route, entries=tuple(replace(x, permission=permission) if x is e else x
                                        for x in route.entries))


def drain(route: TopicRoute, broker_group: str) -> TopicRoute:
    """``broker_group``'s queues made read-only: no new writes, consumers read what is there.
    Refused for the last writable group (the topic would take no writes at all)."""
    new = _with_permission(route, broker_group, READ_ONLY)
    if new is not route and not any(e.writable for e in new.entries):
        raise RouteConflict(route.topic, f"broker group {broker_group} is the last that takes its "
                                         f"writes; expand it to another group first")
    return new


def reopen(route: TopicRoute, broker_group: str) -> TopicRoute:
    """``broker_group``'s queues writable again (a drain undone)."""
    return _with_permission(route, broker_group, READ_WRITE)


def remove_group(route: TopicRoute, broker_group: str, lag: Mapping[str, int],
                 force: bool = False) -> TopicRoute:
    """``route`` without ``broker_group``. ``lag``: per consumer group, the messages it has
    not read in ``broker_group``'s queues of this topic. Refused while ``broker_group`` still
    takes writes, while any lag remains (unless ``force``), and for the route's last group
    (delete the topic instead). Its indices are not given out again; its data stays in its
    log."""
    e = route.entry(broker_group)
    if e is None:
        raise RouteConflict(route.topic, f"broker group {broker_group} holds no queues of it "
                                         f"(its groups: {', '.join(route.groups)})")
    if len(route.entries) == 1:
        raise RouteConflict(route.topic, f"broker group {broker_group} is its only group; delete "
                                         f"the topic instead")
    if e.writable and not force:
        raise RouteConflict(route.topic, f"broker group {broker_group} still takes its writes; "
                                         f"drain it first (or pass --force)")
    pending = {consumer_group: n for consumer_group, n in sorted(lag.items()) if n > 0}
    if pending and not force:
        raise RouteHasLag(route.topic, broker_group,
                          ", ".join(f"{c}: {n} unread" for c, n in pending.items()))
    new = replace(route, entries=tuple(x for x in route.entries if x is not e))
    if not any(x.writable for x in new.entries):
        raise RouteConflict(route.topic, f"without broker group {broker_group} no group would take "
                                         f"its writes; reopen or expand another group first")
    return new


def route_answer(cluster: str, route: TopicRoute, groups: Mapping[str, BrokerGroup]) -> dict:
    """``route`` as ROUTE answers it (docs/protocol.md): its entries, each with its group's
    primary ("" = none known), epoch and whether the operator lets it take writes."""
    entries = []
    for e in route.entries:
        g = groups.get(e.group) or BrokerGroup(e.group)
        entries.append({"group": e.group, "queues": e.queues, "permission": e.permission,
                        "base": e.base, "primary": g.primary, "epoch": g.epoch,
                        "open_for_writes": g.open_for_writes})
    return {"cluster": cluster, "topic": route.topic, "version": route.version,
            "groups": entries}
