"""Kafka's classic consumer group protocol: who is in a group, its generation, and the
assignments its leader hands out (JoinGroup, SyncGroup, Heartbeat, LeaveGroup).

A rebalance starts when a member joins or leaves; every member must join again (the others
learn of it from their heartbeat: REBALANCE_IN_PROGRESS). It completes once every member
has joined and no new join came for :data:`SETTLE_S`, or at the longest rebalance time-out,
without the members that did not join: the generation goes up, the leader (a member) gets
every member's subscription and assigns the partitions, as Kafka clients do themselves,
and SyncGroup hands each member its part. A member that sends no heartbeat for its session
time-out is dropped, which starts a rebalance.

The state lives in the server's memory, one per server, as this server is every group's
coordinator; the committed offsets live in FMQ's consumer groups (:mod:`.group_offsets`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

logger = logging.getLogger("fmq.server.kafka")

#: A rebalance waits this long after the last join for more members (a group starting
#: with several consumers gets them all in its first generation).
SETTLE_S = 0.3

EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", \
    "Stable"


class GroupError(Exception):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


@dataclass
class Member:
    member_id: str
    protocols: list[tuple[str, bytes]]
    session_timeout: float
    rebalance_timeout: float
    last_seen: float
    join: asyncio.Future | None = None
    sync: asyncio.Future | None = None
    assignment: bytes = b""


@dataclass
class KafkaGroup:
    name: str
    protocol_type: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    generation: int = 0
    leader: str = ""
    protocol: str | None = None
    state: str = EMPTY
    settle: asyncio.TimerHandle | None = None
    deadline: asyncio.TimerHandle | None = None


class GroupCoordinator:
    """Every Kafka group of one server (event-loop thread only)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.groups: dict[str, KafkaGroup] = {}
        self._ids = itertools.count(1)

    # ------------------------------------------------------------------ JoinGroup

    async def join(self, name: str, member_id: str, client_id: str, protocol_type: str,
                   protocols: list[tuple[str, bytes]], session_timeout: float,
                   rebalance_timeout: float) -> dict:
        group = self.groups.setdefault(name, KafkaGroup(name))
        if group.members and protocol_type != group.protocol_type:
            raise GroupError(ErrorCode.inconsistent_group_protocol)
        if not member_id:
            member_id = f"{client_id or 'kafka'}-{next(self._ids)}"
        elif member_id not in group.members:
            raise GroupError(ErrorCode.unknown_member_id)
        group.protocol_type = protocol_type
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = Member(member_id, protocols, session_timeout,
                                                       rebalance_timeout, self.loop.time())
        member.protocols, member.session_timeout = protocols, session_timeout
        member.rebalance_timeout, member.last_seen = rebalance_timeout, self.loop.time()
        if member.join is not None and not member.join.done():
            member.join.set_exception(GroupError(ErrorCode.unknown_member_id))
        member.join = self.loop.create_future()
        self._prepare(group)
        self._settle_later(group)
        return await member.join

    def _prepare(self, group: KafkaGroup) -> None:
        """Start a rebalance (or go on with the one under way)."""
        if group.state == PREPARING:
            return
        for member in group.members.values():  # a sync still waiting belongs to the past
            if member.sync is not None and not member.sync.done():
                member.sync.set_exception(GroupError(ErrorCode.rebalance_in_progress))
        group.state = PREPARING
        longest = max((m.rebalance_timeout for m in group.members.values()), default=1.0)
        if group.deadline is not None:
            group.deadline.cancel()
        group.deadline = self.loop.call_later(longest, self._complete, group)

    def _settle_later(self, group: KafkaGroup) -> None:
        if group.settle is not None:
            group.settle.cancel()
        group.settle = self.loop.call_later(SETTLE_S, self._complete_if_all_joined, group)

    def _complete_if_all_joined(self, group: KafkaGroup) -> None:
        if group.state == PREPARING and all(m.join is not None and not m.join.done()
                                            for m in group.members.values()):
            self._complete(group)

    def _complete(self, group: KafkaGroup) -> None:
        if group.state != PREPARING:
            return
        for handle in (group.settle, group.deadline):
            if handle is not None:
                handle.cancel()
        group.settle = group.deadline = None
        for member_id in [m for m, member in group.members.items()
                          if member.join is None or member.join.done()]:
            logger.info("kafka group %s: member %s did not join again; dropped", group.name,
                        member_id)
            del group.members[member_id]
        if not group.members:
            group.state, group.leader, group.protocol = EMPTY, "", None
            group.generation += 1
            return
        group.generation += 1
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.protocol = self._common_protocol(group)
        if group.protocol is None:
            for member in group.members.values():
                member.join.set_exception(GroupError(ErrorCode.inconsistent_group_protocol))
            group.members.clear()
            group.state = EMPTY
            return
        group.state = COMPLETING
        everyone = [{"member_id": m.member_id, "group_instance_id": None,
                     "metadata": dict(m.protocols)[group.protocol]}
                    for m in group.members.values()]
        logger.info("kafka group %s: generation %d with %d members (leader %s, %s)",
                    group.name, group.generation, len(group.members), group.leader,
                    group.protocol)
        for member in group.members.values():
            member.join.set_result({
                "error_code": ErrorCode.none, "generation_id": group.generation,
                "protocol_type": group.protocol_type, "protocol_name": group.protocol,
                "leader": group.leader, "member_id": member.member_id,
                "members": everyone if member.member_id == group.leader else []})
            member.join = None

    @staticmethod
    def _common_protocol(group: KafkaGroup) -> str | None:
        leader = group.members[group.leader]
        for name, _ in leader.protocols:
            if all(name in dict(m.protocols) for m in group.members.values()):
                return name
        return None

    # ------------------------------------------------------------------ SyncGroup

    async def sync(self, name: str, generation: int, member_id: str,
                   assignments: dict[str, bytes]) -> tuple[bytes, KafkaGroup]:
        group, member = self._member(name, generation, member_id)
        if group.state == PREPARING:
            raise GroupError(ErrorCode.rebalance_in_progress)
        if group.state == STABLE:
            return member.assignment, group
        if member_id == group.leader:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result(m.assignment)
            group.state = STABLE
            return member.assignment, group
        member.sync = self.loop.create_future()
        return await member.sync, group

    # ------------------------------------------------------------------ Heartbeat, leave

    def heartbeat(self, name: str, generation: int, member_id: str) -> None:
        group, member = self._member(name, None, member_id)
        member.last_seen = self.loop.time()
        if group.state == PREPARING:
            raise GroupError(ErrorCode.rebalance_in_progress)
        if generation != group.generation:
            raise GroupError(ErrorCode.illegal_generation)

    def leave(self, name: str, member_id: str) -> None:
        group, _ = self._member(name, None, member_id)
        self._drop(group, member_id, "left")

    def _drop(self, group: KafkaGroup, member_id: str, why: str) -> None:
        member = group.members.pop(member_id)
        logger.info("kafka group %s: member %s %s", group.name, member_id, why)
        for pending in (member.join, member.sync):
            if pending is not None and not pending.done():
                pending.set_exception(GroupError(ErrorCode.unknown_member_id))
        if group.members:
            self._prepare(group)
            self._settle_later(group)
        else:
            for handle in (group.settle, group.deadline):
                if handle is not None:
                    handle.cancel()
            group.state, group.leader = EMPTY, ""
            group.generation += 1

    def expire(self) -> None:
        """Drop the members whose session time-out passed without a heartbeat."""
        now = self.loop.time()
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                waiting = member.join is not None and not member.join.done()
                if not waiting and now - member.last_seen > member.session_timeout:
                    self._drop(group, member.member_id, "expired (no heartbeat)")

    def _member(self, name: str, generation: int | None, member_id: str
                ) -> tuple[KafkaGroup, Member]:
        group = self.groups.get(name)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            raise GroupError(ErrorCode.unknown_member_id)
        if generation is not None and generation != group.generation:
            raise GroupError(ErrorCode.illegal_generation)
        return group, member
