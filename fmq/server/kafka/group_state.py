"""What the Kafka group coordinator keeps of one classic consumer group and its members
(:mod:`fmq.server.kafka.group_coordinator` moves them through the states).

A group's states are Kafka's: Empty (no members; its committed offsets live on),
PreparingRebalance (members are rejoining), CompletingRebalance (the new generation is
chosen, the leader's assignment is awaited), Stable, and Dead (deleted).
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class KafkaMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_s: float
    rebalance_timeout_s: float
    protocol_type: str
    #: (name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    #: The JoinGroup answer this member awaits, while it rejoins.
    join_waiter: asyncio.Future | None = None
    #: The SyncGroup answer this member awaits, while the leader computes the assignment.
    sync_waiter: asyncio.Future | None = None
    #: The session timer: the member is dropped when it fires (reset by every heartbeat).
    expiry: asyncio.TimerHandle | None = None

    @property
    def awaiting(self) -> bool:
        """Held in a JoinGroup or SyncGroup: such a member sends no heartbeats meanwhile."""
        return self.join_waiter is not None or self.sync_waiter is not None

    def supports(self, names: set[str]) -> bool:
        return any(name in names for name, _ in self.protocols)

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass
class KafkaGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, KafkaMember] = field(default_factory=dict)
    #: Member ids handed out with MEMBER_ID_REQUIRED, not yet joined (with their timers).
    pending: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    #: group.instance.id -> member id (static members).
    static: dict[str, str] = field(default_factory=dict)
    #: The rebalance's deadline timer and the earliest time it may complete.
    rebalance_timer: asyncio.TimerHandle | None = None
    join_not_before: float = 0.0

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def candidates(self) -> set[str]:
        """The protocols every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = {name for name, _ in members[0].protocols}
        for m in members[1:]:
            common &= {name for name, _ in m.protocols}
        return common

    def accepts(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member of this type and these protocols can join: the type is the
        group's and it shares a protocol with every member already in."""
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool({name for name, _ in protocols} & self.candidates())

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for the first of the common protocols in its own
        order of preference, and the most votes win (ties: the first voter's choice)."""
        common = self.candidates()
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(name for name, _ in m.protocols if name in common)] += 1
        return votes.most_common(1)[0][0]

    def all_rejoined(self) -> bool:
        return not self.pending and all(m.join_waiter is not None
                                        for m in self.members.values())

    def join_answer(self, m: KafkaMember) -> dict:
        """The JoinGroup answer of ``m`` in this generation: the leader's lists every
        member's metadata for the chosen protocol."""
        answer = self.answer(m.member_id, ErrorCode.none)
        if m.member_id == self.leader_id:
            answer["members"] = [{"member_id": o.member_id, "group_instance_id": o.instance_id,
                                  "metadata": o.metadata(self.protocol_name or "")}
                                 for o in self.members.values()]
        return answer

    def answer(self, member_id: str, code: ErrorCode) -> dict:
        """A JoinGroup answer: this generation's, or ``code`` alone."""
        ok = code == ErrorCode.none
        return {"error_code": code, "generation_id": self.generation if ok else -1,
                "protocol_type": self.protocol_type if ok else None,
                "protocol_name": self.protocol_name if ok else None,
                "leader": (self.leader_id or "") if ok else "", "skip_assignment": False,
                "member_id": member_id, "members": []}
