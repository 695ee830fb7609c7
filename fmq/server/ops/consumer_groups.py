"""Consumer groups: membership and queue assignment, in memory on the server.

Each queue of a topic goes to exactly one live member of the group subscribed to that topic:
subscribers sorted by id, queue ``q`` to subscriber ``(base + q) mod n``. A member joins,
heart-beats and leaves; one that misses heart-beats for the session timeout, or whose
connection closes, is dropped. Any change bumps the group's generation and moves queues.

**One reader per queue at a time** (:mod:`fmq.server.ops.queue_handover`): the rule names each
queue's *target*, but a queue moves to its target only once the member holding it released
it: it said it applied an assignment without the queue (GROUP_SYNC), it left, its session
expired or its connection closed. Until then the holder keeps the queue (it is in neither
member's answer once it moves away) and the target does not get it, so two members are
never given one queue at once. A client that only heart-beats (GROUP_HEARTBEAT, older ones)
releases what it was told to drop at its next heartbeat or join, as before.

Every operation costs in proportion to what it touches, never to the size of the server:
a join, leave or topic change recomputes only the topics of that member (the owners of a
topic depend only on its sorted subscribers); a heartbeat is a dictionary lookup; expiry
pops members from the front of a deadline-ordered list; a closed connection finds its
members through an index by owner. Limits on topics per member, members per group and
members per connection bound the rest (a client cannot make one request, or the server's
memory, arbitrarily large).

Pure state (the clock is passed in), driven by the server's event loop, so no locks.
"""

from __future__ import annotations

import bisect
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fmq.errors import GroupProtocolConflict, InvalidArgument
from fmq.message import check_name, check_topic
from fmq.server.ops import queue_handover
from fmq.server.ops.group_state import ConsumerGroup, GroupMember

MemberKey = tuple[str, str]  # (group, member id)
__all__ = ["ConsumerGroup", "ConsumerGroupCoordinator", "ConsumerGroupLimits", "GroupMember"]


@dataclass(frozen=True)
class ConsumerGroupLimits:
    """What one client may make the coordinator hold (see ServerConfig)."""

    max_topics_per_member: int = 1000
    max_members_per_group: int = 1000
    max_members_per_connection: int = 32


class ConsumerGroupCoordinator:
    def __init__(self, queues_per_topic: int | Callable[[str], int], session_timeout_ms: int,
                 clock: Callable[[], float] = time.monotonic,
                 limits: ConsumerGroupLimits | None = None,
                 queue_base: Callable[[str], int] = lambda _topic: 0,
                 wall_clock: Callable[[], float] = time.time) -> None:
        """``queues_per_topic``: one count for every topic, or the broker's per-topic count
        (``Broker.queue_count``): a topic may have more queues than the setting.
        ``queue_base``: the global index of a topic's queue 0 in this broker group (its
        route entry's base in a cluster, docs/cluster.md; 0 outside one).
        ``wall_clock``: a new group's generations start at its microseconds, so that a
        primary after a fail-over does not answer the generations its predecessor did (a
        member's GROUP_SYNC names one it applied)."""
        self.wall_clock = wall_clock
        self.queue_count = (queues_per_topic if callable(queues_per_topic)
                            else lambda _topic, n=queues_per_topic: n)
        self.queue_base = queue_base
        self.session_timeout = session_timeout_ms / 1000.0
        self.clock = clock
        self.limits = limits or ConsumerGroupLimits()
        self.groups: dict[str, ConsumerGroup] = {}
        #: Every member, least recently seen first: expiry looks only at the front.
        self._by_last_seen: OrderedDict[MemberKey, GroupMember] = OrderedDict()
        self._by_owner: dict[object, set[MemberKey]] = {}
        #: Live members a group has on another protocol (the Kafka door's groups,
        #: docs/kafka.md): a group with some refuses FMQ members.
        self.foreign_members: Callable[[str], int] = lambda _group: 0

    def _topics(self, topics: list[str]) -> frozenset[str]:
        if not topics:
            raise InvalidArgument("a consumer group member must subscribe to at least one topic")
        limit = self.limits.max_topics_per_member
        if len(topics) > limit:  # checked before any per-topic work
            raise InvalidArgument(
                f"a consumer group member may subscribe to at most {limit} topics "
                f"(max_topics_per_member), this one lists {len(topics)}; split the topics "
                f"over several members or groups")
        return frozenset(check_topic(t) for t in topics)

    def join(self, group: str, member_id: str | None, topics: list[str], owner: object,
             applied: int | None = None) -> tuple[str, int, list[tuple[str, int]]]:
        """Join ``group`` (or refresh a member already in it); ``applied`` as for
        :meth:`heartbeat`."""
        check_name(group, "group", allow_none=False)
        subs = self._topics(topics)
        if member_id is None:
            member_id = uuid.uuid4().hex
        check_name(member_id, "member_id", allow_none=False)
        now = self.clock()
        g = self.groups.get(group)
        m = g.members.get(member_id) if g is not None else None
        if m is None:
            if g is None and (foreign := self.foreign_members(group)):
                raise GroupProtocolConflict(group, foreign)
            self._check_room(g, owner)
            if g is None:
                g = self.groups[group] = ConsumerGroup(
                    group, generation=int(self.wall_clock() * 1_000_000))
            m = g.members[member_id] = GroupMember(member_id, subs, owner, now)
            self._by_last_seen[(group, member_id)] = m
            self._by_owner.setdefault(owner, set()).add((group, member_id))
            self._subscribe(g, m, subs)
            self._rebalance(g, subs)
            m.joined = g.generation
        else:
            if m.owner is not owner:
                self._check_room(None, owner)
                self._set_owner(g.name, m, owner)
            self._seen(g.name, m, now)
            if m.topics != subs:
                changed = m.topics ^ subs
                self._unsubscribe(g, m, m.topics - subs)
                self._subscribe(g, m, subs - m.topics)
                m.topics = subs
                self._rebalance(g, changed)
            queue_handover.release(g, m, queue_handover.released_by(
                m, applied, now, self.session_timeout))
        m.told = g.generation
        return member_id, g.generation, m.assignment()

    def heartbeat(self, group: str, member_id: str, topics: list[str], owner: object,
                  applied: int | None = None) -> tuple[int, list[tuple[str, int]]]:
        """Refresh a member; an expired or unknown one is joined again (same id).
        ``applied`` (GROUP_SYNC): the generation whose answer the member reads by now, so
        it released the queues that answer left out; None (GROUP_HEARTBEAT): it says
        nothing of it, and is taken to have released what it was told to drop."""
        self.expire()
        _, gen, assigned = self.join(group, member_id, topics, owner, applied)
        return gen, assigned

    def leave(self, group: str, member_id: str) -> bool:
        g = self.groups.get(group)
        if g is None or member_id not in g.members:
            return False
        self._remove(g, [g.members[member_id]])
        return True

    def drop_owner(self, owner: object) -> list[MemberKey]:
        """Remove every member a closed connection had joined."""
        keys = sorted(self._by_owner.get(owner, ()))
        self._drop(keys)
        return keys

    def expire(self) -> list[MemberKey]:
        """Drop members silent for longer than the session timeout."""
        cutoff = self.clock() - self.session_timeout
        doomed = []
        for key, m in self._by_last_seen.items():
            if m.last_seen >= cutoff:
                break  # the rest were seen later
            doomed.append(key)
        self._drop(doomed)
        return doomed

    # ------------------------------------------------------------------ bookkeeping

    def _check_room(self, g: ConsumerGroup | None, owner: object) -> None:
        lim = self.limits
        if g is not None and len(g.members) >= lim.max_members_per_group:
            raise InvalidArgument(
                f"consumer group {g.name!r} already has {len(g.members)} members, the limit "
                f"(max_members_per_group) is {lim.max_members_per_group}; a group never uses "
                f"more members than it has queues, so join fewer")
        held = len(self._by_owner.get(owner, ()))
        if held >= lim.max_members_per_connection:
            raise InvalidArgument(
                f"this connection already holds {held} consumer group memberships, the "
                f"limit (max_members_per_connection) is {lim.max_members_per_connection}; "
                f"leave groups you no longer read or use another connection")

    def _seen(self, group: str, m: GroupMember, now: float) -> None:
        m.last_seen = now
        self._by_last_seen.move_to_end((group, m.member_id))

    def _set_owner(self, group: str, m: GroupMember, owner: object) -> None:
        key = (group, m.member_id)
        self._forget_owner(key, m.owner)
        m.owner = owner
        self._by_owner.setdefault(owner, set()).add(key)

    def _forget_owner(self, key: MemberKey, owner: object) -> None:
        held = self._by_owner.get(owner)
        if held is not None:
            held.discard(key)
            if not held:
                del self._by_owner[owner]

    def _drop(self, keys: Iterable[MemberKey]) -> None:
        by_group: dict[str, list[GroupMember]] = {}
        for group, mid in keys:
            g = self.groups.get(group)
            if g is not None and mid in g.members:
                by_group.setdefault(group, []).append(g.members[mid])
        for group, members in by_group.items():
            self._remove(self.groups[group], members)

    def _remove(self, g: ConsumerGroup, members: list[GroupMember]) -> None:
        """Take ``members`` out of ``g`` and rebalance once for all of them."""
        changed: set[str] = set()
        for m in members:
            key = (g.name, m.member_id)
            del g.members[m.member_id]
            self._by_last_seen.pop(key, None)
            self._forget_owner(key, m.owner)
            self._unsubscribe(g, m, m.topics)
            changed |= m.topics | queue_handover.drop_holder(g, m)
        if g.members:
            self._rebalance(g, changed)
        else:
            del self.groups[g.name]

    @staticmethod
    def _subscribe(g: ConsumerGroup, m: GroupMember, topics: Iterable[str]) -> None:
        for t in topics:
            bisect.insort(g.subscribers.setdefault(t, []), m.member_id)

    @staticmethod
    def _unsubscribe(g: ConsumerGroup, m: GroupMember, topics: Iterable[str]) -> None:
        for t in topics:
            subs = g.subscribers[t]
            subs.pop(bisect.bisect_left(subs, m.member_id))
            if not subs:
                del g.subscribers[t]

    def _rebalance(self, g: ConsumerGroup, topics: Iterable[str]) -> None:
        """Recompute the owners of ``topics`` (the only ones whose subscribers changed):
        subscribers of a topic sorted by id, queue ``q`` to subscriber ``(base + q) mod n``.
        ``base + q`` is the queue's global index in a cluster: every broker group's
        primary applies this rule to its own queues, so a consumer group whose members
        joined every group (with the same member ids) is spread over the whole topic
        evenly, and each queue has one owner, the one its own group chose. A queue whose
        target changed moves once its holder released it (:mod:`queue_handover`). Only
        the holders of the topics' queues are touched, not every subscriber."""
        g.generation += 1
        for t in topics:
            g.owners.pop(t, None)
            g.layouts.pop(t, None)
            subs = g.subscribers.get(t)
            targets: list[str] = []
            if subs:
                base, count = g.layouts[t] = self._layout(t)
                targets = g.owners[t] = [subs[(base + q) % len(subs)] for q in range(count)]
            queue_handover.settle(g, t, targets, self.clock())

    def _layout(self, topic: str) -> tuple[int, int]:
        return self.queue_base(topic), self.queue_count(topic)

    def refresh(self) -> list[str]:
        """Rebalance, with a new generation, every group whose topics' queue base or
        queue count changed since their owners were computed (a route appeared for a
        topic, or its local queues grew); the groups rebalanced. Called when the
        cluster's routes change: costs one look per subscribed topic of each group."""
        changed_groups = []
        for g in self.groups.values():
            changed = [t for t in g.subscribers if g.layouts.get(t) != self._layout(t)]
            if changed:
                self._rebalance(g, changed)
                changed_groups.append(g.name)
        return changed_groups

    def member_count(self, group: str) -> int:
        """Live members of ``group`` (0 for a group nobody joined)."""
        g = self.groups.get(group)
        return len(g.members) if g is not None else 0

    def describe(self) -> dict:
        """Per group: generation, each member's queues, and the topics its members name."""
        topics = self.subscriptions()
        return {name: {"generation": g.generation,
                       "members": {mid: [f"{t}/{q}" for t, q in m.assignment()]
                                   for mid, m in g.members.items()},
                       "topics": topics[name]}
                for name, g in self.groups.items()}

    def subscriptions(self) -> dict[str, list[str]]:
        """The topics the live members of each group name (a group's lag covers them)."""
        return {name: sorted(t for t, ids in g.subscribers.items() if ids)
                for name, g in self.groups.items()}
