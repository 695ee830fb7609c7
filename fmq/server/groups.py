"""Consumer groups: membership and queue assignment, in memory on the server.

Each queue of a topic goes to exactly one live member of the group subscribed to that topic:
members sorted by id, queue ``q`` to member ``q mod n``. A member joins, heart-beats and
leaves; one that misses heart-beats for the session timeout, or whose connection closes, is
dropped. Any change bumps the group's generation and moves queues.

During a rebalance two members may briefly both read a queue (the old owner learns of the
change at its next heartbeat). Delivery is at-least-once: consumers commit offsets after
processing, so an overlap causes duplicates, never loss.

Pure state (the clock is passed in), driven by the server's event loop, so no locks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from fmq.errors import InvalidArgument
from fmq.message import check_name, check_topic


@dataclass
class Member:
    member_id: str
    topics: tuple[str, ...]
    owner: object  # the connection that joined it (dropped with it)
    last_seen: float


@dataclass
class Group:
    name: str
    generation: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    assignment: dict[str, list[tuple[str, int]]] = field(default_factory=dict)


class GroupCoordinator:
    def __init__(self, queues_per_topic: int, session_timeout_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.queues = queues_per_topic
        self.session_timeout = session_timeout_ms / 1000.0
        self.clock = clock
        self.groups: dict[str, Group] = {}

    @staticmethod
    def _topics(topics: list[str]) -> tuple[str, ...]:
        if not topics:
            raise InvalidArgument("a consumer group member must subscribe to at least one topic")
        return tuple(sorted({check_topic(t) for t in topics}))

    def join(self, group: str, member_id: str | None, topics: list[str],
             owner: object) -> tuple[str, int, list[tuple[str, int]]]:
        check_name(group, "group", allow_none=False)
        subs = self._topics(topics)
        g = self.groups.setdefault(group, Group(group))
        if member_id is None:
            member_id = uuid.uuid4().hex
        check_name(member_id, "member_id", allow_none=False)
        now = self.clock()
        m = g.members.get(member_id)
        if m is None or m.topics != subs:
            g.members[member_id] = Member(member_id, subs, owner, now)
            self._rebalance(g)
        else:
            m.last_seen = now
            m.owner = owner
        return member_id, g.generation, list(g.assignment.get(member_id, []))

    def heartbeat(self, group: str, member_id: str, topics: list[str],
                  owner: object) -> tuple[int, list[tuple[str, int]]]:
        """Refresh a member; an expired or unknown one is joined again (same id)."""
        self.expire()
        _, gen, assigned = self.join(group, member_id, topics, owner)
        return gen, assigned

    def leave(self, group: str, member_id: str) -> bool:
        g = self.groups.get(group)
        if g is None or g.members.pop(member_id, None) is None:
            return False
        self._rebalance(g)
        return True

    def drop_owner(self, owner: object) -> list[tuple[str, str]]:
        """Remove every member a closed connection had joined."""
        return self._drop(lambda m: m.owner is owner)

    def expire(self) -> list[tuple[str, str]]:
        """Drop members silent for longer than the session timeout."""
        now = self.clock()
        return self._drop(lambda m: now - m.last_seen > self.session_timeout)

    def _drop(self, doomed) -> list[tuple[str, str]]:
        """Remove the members ``doomed(member)`` picks; rebalance the groups that lost one."""
        dropped = []
        for g in list(self.groups.values()):
            gone = [mid for mid, m in g.members.items() if doomed(m)]
            for mid in gone:
                del g.members[mid]
                dropped.append((g.name, mid))
            if gone:
                self._rebalance(g)
        return dropped

    def _rebalance(self, g: Group) -> None:
        g.generation += 1
        assignment: dict[str, list[tuple[str, int]]] = {mid: [] for mid in g.members}
        topics = sorted({t for m in g.members.values() for t in m.topics})
        for topic in topics:
            subs = sorted(mid for mid, m in g.members.items() if topic in m.topics)
            for q in range(self.queues):
                assignment[subs[q % len(subs)]].append((topic, q))
        g.assignment = assignment
        if not g.members:
            del self.groups[g.name]

    def describe(self) -> dict:
        return {name: {"generation": g.generation,
                       "members": {mid: [f"{t}/{q}" for t, q in g.assignment.get(mid, [])]
                                   for mid in g.members}}
                for name, g in self.groups.items()}
