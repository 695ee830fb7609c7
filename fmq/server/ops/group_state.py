"""What the server knows of a consumer group: its members, what each is given and holds,
and each queue's target and holder (kept by :mod:`fmq.server.ops.consumer_groups` and
:mod:`fmq.server.ops.queue_handover`)."""

from __future__ import annotations

from dataclasses import dataclass, field

QueueKey = tuple[str, int]  # (topic, queue id)


@dataclass
class GroupMember:
    member_id: str
    topics: frozenset[str]
    owner: object  # the connection that joined it (dropped with it)
    last_seen: float
    #: The generation of this member's first answer from this coordinator.
    joined: int = 0
    #: The generation of the last answer it was given.
    told: int = 0
    #: Queue ids this member holds (it may read them), per topic: its own topics' and those
    #: it was told to drop but has not released yet.
    held: dict[str, set[int]] = field(default_factory=dict)
    #: Held queues it was told to drop, with the generation and the time that told it.
    releasing: dict[QueueKey, tuple[int, float]] = field(default_factory=dict)

    def assignment(self) -> list[tuple[str, int]]:
        """The queues it reads: those it holds and was not told to drop, in order."""
        dropping = self.releasing
        return [(t, q) for t in sorted(self.held) for q in sorted(self.held[t])
                if not dropping or (t, q) not in dropping]


@dataclass
class ConsumerGroup:
    name: str
    generation: int = 0
    members: dict[str, GroupMember] = field(default_factory=dict)
    #: Sorted member ids subscribed to each topic.
    subscribers: dict[str, list[str]] = field(default_factory=dict)
    #: The member the rule gives each queue of a topic (index = queue id): its target,
    #: which reads it once the previous holder released it.
    owners: dict[str, list[str]] = field(default_factory=dict)
    #: The member holding each queue of a topic (queue id -> member id): at most one.
    holders: dict[str, dict[int, str]] = field(default_factory=dict)
    #: The (queue base, queue count) each topic's owners were computed with.
    layouts: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def assignment(self) -> dict[str, list[tuple[str, int]]]:
        return {mid: m.assignment() for mid, m in self.members.items()}
