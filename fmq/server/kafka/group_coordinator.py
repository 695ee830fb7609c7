"""Kafka's classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) as
a state machine on the server's event loop, the way Kafka's GroupCoordinator runs it:

* A member joins (JoinGroup). From version 4 a member without an id first gets one with
  MEMBER_ID_REQUIRED and joins again with it. A join moves the group to
  PreparingRebalance: every member must rejoin (its JoinGroup is held) until all have or
  the rebalance timeout (the members' largest) passes; those that did not rejoin are
  dropped. Then the new generation starts (CompletingRebalance): the protocol all members
  support is chosen by vote, the leader's JoinGroup answer carries every member's
  metadata, the others' carry none.
* Each member then sends SyncGroup; the leader's carries the assignment (computed by the
  client's assignor: range, round-robin, cooperative-sticky...), which answers every held
  SyncGroup, and the group is Stable.
* Members heartbeat within their session timeout; a member silent for longer is dropped
  and the others rebalance (they learn it from REBALANCE_IN_PROGRESS on their heartbeat).
  A member held in a JoinGroup or SyncGroup is not expected to heartbeat.
* Static members (group.instance.id): a member joining again under a known instance id
  takes over that instance's place and the old member id is fenced (FENCED_INSTANCE_ID).

Every wait is a future answered by another member's request or by a loop timer (the
rebalance timeout, a session timeout), so nothing waits unbounded and no thread is held.
The committed offsets are not here: they are FMQ's consumer offsets
(:mod:`fmq.server.kafka.group_offsets`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from fmq.server.kafka.group_state import GroupState, KafkaGroup, KafkaMember
from fmq.server.ops.joins_in_question import JoinsInQuestion

logger = logging.getLogger("fmq.server.kafka")

#: Session timeouts a member may ask for (Kafka's group.min/max.session.timeout.ms are
#: 6 s and 30 min; FMQ lets tests and impatient clients go lower).
MIN_SESSION_TIMEOUT_MS = 1000
MAX_SESSION_TIMEOUT_MS = 30 * 60 * 1000
#: How long the first rebalance of an empty group waits for more members to come (Kafka's
#: group.initial.rebalance.delay.ms is 3 s), so that a group starting together settles in
#: one generation.
INITIAL_REBALANCE_DELAY_S = 1.0

PREPARING, COMPLETING = GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE
STABLE, EMPTY, DEAD = GroupState.STABLE, GroupState.EMPTY, GroupState.DEAD


class KafkaGroupError(Exception):
    """A request refused with a Kafka error code."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


class KafkaGroupCoordinator:
    """The Kafka consumer groups of one server. ``fmq_members(group)`` counts the live
    members an FMQ SDK consumer group of that name has: a group with some refuses Kafka
    members (the two protocols cannot share the queues)."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 fmq_members: Callable[[str], int]) -> None:
        self.loop = loop
        self.fmq_members = fmq_members
        #: Raises KafkaGroupError (INCONSISTENT_GROUP_PROTOCOL, or a retriable code when
        #: they cannot be asked) when a group has live FMQ members in another broker group
        #: of the cluster (:mod:`.group_protocols`); None outside a cluster.
        self.fmq_elsewhere: Callable[[str], Awaitable[None]] | None = None
        self.groups: dict[str, KafkaGroup] = {}
        #: Joins of groups without members whose question to the other broker groups is
        #: out, by group: they count as live members meanwhile.
        self._checking = JoinsInQuestion()

    def live_members(self, group_id: str) -> int:
        """Members of a Kafka group (the FMQ side's check before an FMQ member joins),
        joins being checked with the other broker groups included."""
        g = self.groups.get(group_id)
        return (len(g.members) if g is not None else 0) + self._checking.count(group_id)

    async def _check_elsewhere(self, group_id: str) -> None:
        """A join of a group without members asks the other broker groups for live FMQ
        members first, counted as a member while it asks: of an FMQ join and a Kafka join
        crossing each other, at least one sees the other."""
        g = self.groups.get(group_id)
        if self.fmq_elsewhere is None or (g is not None and g.members):
            return
        with self._checking.asking(group_id):
            await self.fmq_elsewhere(group_id)

    # ------------------------------------------------------------------ JoinGroup

    async def join(self, group_id: str, member_id: str, instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_id: bool) -> dict:
        """The JoinGroup answer (held until the rebalance completes)."""
        if not group_id:
            raise KafkaGroupError(ErrorCode.invalid_group_id)
        if not MIN_SESSION_TIMEOUT_MS <= session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise KafkaGroupError(ErrorCode.invalid_session_timeout)
        if not protocol_type or not protocols:
            raise KafkaGroupError(ErrorCode.inconsistent_group_protocol)
        await self._check_elsewhere(group_id)
        # No await from here to the member being in the group (or answered with its id).
        if self.fmq_members(group_id):
            logger.info("kafka group %r: join from %s refused, the group has live FMQ "
                        "consumers (INCONSISTENT_GROUP_PROTOCOL)", group_id, client_host)
            raise KafkaGroupError(ErrorCode.inconsistent_group_protocol)
        g = self.groups.get(group_id)
        if g is None:
            if member_id:
                raise KafkaGroupError(ErrorCode.unknown_member_id)
            g = self.groups[group_id] = KafkaGroup(group_id)
        if not g.accepts(protocol_type, protocols):
            raise KafkaGroupError(ErrorCode.inconsistent_group_protocol)
        rebalance_s = (rebalance_timeout_ms if rebalance_timeout_ms > 0
                       else session_timeout_ms) / 1000.0
        member = KafkaMember(member_id, instance_id, client_id, client_host,
                             session_timeout_ms / 1000.0, rebalance_s, protocol_type, protocols)
        if not member_id:
            return await self._join_new(g, member, require_known_id)
        if member_id in g.pending:
            g.pending.pop(member_id).cancel()
            return await self._add_and_wait(g, member)
        known = g.members.get(member_id)
        if known is None:
            if instance_id is not None and instance_id in g.static:
                raise KafkaGroupError(ErrorCode.fenced_instance_id)
            raise KafkaGroupError(ErrorCode.unknown_member_id)
        return await self._rejoin(g, known, member)

    async def _join_new(self, g: KafkaGroup, member: KafkaMember,
                        require_known_id: bool) -> dict:
        member.member_id = f"{member.client_id or 'member'}-{uuid.uuid4()}"
        if member.instance_id is not None and member.instance_id in g.static:
            old = g.members.get(g.static[member.instance_id])
            if old is not None:  # the instance restarted: its old id is fenced
                logger.info("kafka group %r: static member %r took over from %s",
                            g.group_id, member.instance_id, old.member_id)
                self._remove(g, old, ErrorCode.fenced_instance_id)
        elif require_known_id:
            # The client must come back with this id: a member that dies between the two
            # requests leaves no member behind, only this pending id, forgotten after its
            # session timeout.
            g.pending[member.member_id] = self.loop.call_later(
                member.session_timeout_s, self._forget_pending, g, member.member_id)
            return g.answer(member.member_id, ErrorCode.member_id_required)
        return await self._add_and_wait(g, member)

    async def _add_and_wait(self, g: KafkaGroup, member: KafkaMember) -> dict:
        if not g.accepts(member.protocol_type, member.protocols):
            raise KafkaGroupError(ErrorCode.inconsistent_group_protocol)
        g.members[member.member_id] = member
        if member.instance_id is not None:
            g.static[member.instance_id] = member.member_id
        if g.protocol_type is None:
            g.protocol_type = member.protocol_type
        logger.info("kafka group %r: member %s joined from %s", g.group_id,
                    member.member_id, member.client_host)
        return await self._wait_join(g, member)

    async def _rejoin(self, g: KafkaGroup, member: KafkaMember, asked: KafkaMember) -> dict:
        unchanged = member.same_protocols(asked.protocols)
        member.protocols = asked.protocols
        member.session_timeout_s = asked.session_timeout_s
        member.rebalance_timeout_s = asked.rebalance_timeout_s
        if g.is_(COMPLETING) and unchanged:
            return g.join_answer(member)  # its answer was lost: the same again
        if g.is_(STABLE) and unchanged and member.member_id != g.leader_id:
            self._keep_alive(g, member)
            return g.join_answer(member)
        return await self._wait_join(g, member)

    async def _wait_join(self, g: KafkaGroup, member: KafkaMember) -> dict:
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(g.answer(member.member_id,
                                                       ErrorCode.rebalance_in_progress))
        waiter = member.join_waiter = self.loop.create_future()
        self._cancel_expiry(member)
        if g.is_(EMPTY, STABLE, COMPLETING):
            self._prepare_rebalance(g, f"member {member.member_id} joined")
        else:
            self._try_complete_join(g)
        # Bounded: the rebalance timer answers every held join by its deadline.
        return await waiter

    def _prepare_rebalance(self, g: KafkaGroup, reason: str) -> None:
        if g.is_(COMPLETING):  # the assignment being computed is void: rejoin
            for m in g.members.values():
                m.assignment = b""
                self._answer_sync(m, ErrorCode.rebalance_in_progress, b"")
        now = self.loop.time()
        g.join_not_before = now + INITIAL_REBALANCE_DELAY_S if g.is_(EMPTY) else now
        g.state = PREPARING
        timeout = max((m.rebalance_timeout_s for m in g.members.values()), default=0.0)
        if g.rebalance_timer is not None:
            g.rebalance_timer.cancel()
        g.rebalance_timer = self.loop.call_later(
            max(timeout, INITIAL_REBALANCE_DELAY_S), self._rebalance_deadline, g)
        logger.info("kafka group %r: rebalancing at generation %d (%s)", g.group_id,
                    g.generation, reason)
        self._try_complete_join(g)

    def _try_complete_join(self, g: KafkaGroup) -> None:
        if not g.is_(PREPARING) or not g.all_rejoined():
            return
        delay = g.join_not_before - self.loop.time()
        if delay > 0:
            self.loop.call_later(delay, self._try_complete_join, g)
            return
        self._complete_join(g)

    def _rebalance_deadline(self, g: KafkaGroup) -> None:
        g.rebalance_timer = None
        if not g.is_(PREPARING):
            return
        for m in [m for m in g.members.values() if m.join_waiter is None]:
            logger.info("kafka group %r: member %s did not rejoin within the rebalance "
                        "timeout; dropped", g.group_id, m.member_id)
            self._remove(g, m, ErrorCode.unknown_member_id, rebalance=False)
        for mid in list(g.pending):
            g.pending.pop(mid).cancel()
        self._complete_join(g)

    def _complete_join(self, g: KafkaGroup) -> None:
        if g.rebalance_timer is not None:
            g.rebalance_timer.cancel()
            g.rebalance_timer = None
        g.generation += 1
        if not g.members:
            g.state, g.protocol_name, g.leader_id = EMPTY, None, None
            logger.info("kafka group %r is empty (generation %d)", g.group_id, g.generation)
            return
        g.protocol_name = g.select_protocol()
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members))
        g.state = COMPLETING
        logger.info("kafka group %r: generation %d with %d members, protocol %s, leader %s",
                    g.group_id, g.generation, len(g.members), g.protocol_name, g.leader_id)
        for m in g.members.values():
            waiter, m.join_waiter = m.join_waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result(g.join_answer(m))
            self._keep_alive(g, m)

    # ------------------------------------------------------------------ SyncGroup

    async def sync(self, group_id: str, member_id: str, instance_id: str | None,
                   generation: int, protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> tuple[ErrorCode, bytes]:
        """(error, this member's assignment), held until the leader's SyncGroup."""
        g, m = self._member(group_id, member_id, instance_id)
        if generation != g.generation:
            raise KafkaGroupError(ErrorCode.illegal_generation)
        if ((protocol_type is not None and protocol_type != g.protocol_type)
                or (protocol_name is not None and protocol_name != g.protocol_name)):
            raise KafkaGroupError(ErrorCode.inconsistent_group_protocol)
        if g.is_(PREPARING):
            raise KafkaGroupError(ErrorCode.rebalance_in_progress)
        self._keep_alive(g, m)
        if g.is_(STABLE):
            return ErrorCode.none, m.assignment
        waiter = m.sync_waiter = self.loop.create_future()
        if member_id == g.leader_id:
            for other in g.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            g.state = STABLE
            logger.info("kafka group %r: generation %d is stable", g.group_id, g.generation)
            for other in g.members.values():
                self._answer_sync(other, ErrorCode.none, other.assignment)
        # Bounded: the leader's SyncGroup, its leaving or its session timeout (which
        # rebalances, answering REBALANCE_IN_PROGRESS) ends the wait; the timeout below
        # only guards against a bug leaving the member held for ever.
        try:
            return await asyncio.wait_for(asyncio.shield(waiter),
                                          m.rebalance_timeout_s + m.session_timeout_s)
        except TimeoutError:
            if m.sync_waiter is waiter:
                m.sync_waiter = None
            return ErrorCode.rebalance_in_progress, b""

    def _answer_sync(self, m: KafkaMember, code: ErrorCode, assignment: bytes) -> None:
        waiter, m.sync_waiter = m.sync_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((code, assignment))

    # ------------------------------------------------------------------ Heartbeat, Leave

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None,
                  generation: int) -> ErrorCode:
        g, m = self._member(group_id, member_id, instance_id)
        if generation != g.generation:
            raise KafkaGroupError(ErrorCode.illegal_generation)
        self._keep_alive(g, m)
        return ErrorCode.rebalance_in_progress if g.is_(PREPARING) else ErrorCode.none

    def leave(self, group_id: str, member_id: str, instance_id: str | None) -> ErrorCode:
        """One member leaves (by member id, or by instance id alone for a static one)."""
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.unknown_member_id
        if not member_id and instance_id is not None:
            member_id = g.static.get(instance_id, "")
        if member_id in g.pending:
            g.pending.pop(member_id).cancel()
            return ErrorCode.none
        m = g.members.get(member_id)
        if m is None:
            return ErrorCode.unknown_member_id
        if instance_id is not None and m.instance_id not in (None, instance_id):
            return ErrorCode.fenced_instance_id
        logger.info("kafka group %r: member %s left", g.group_id, member_id)
        self._remove(g, m, ErrorCode.unknown_member_id)
        return ErrorCode.none

    # ------------------------------------------------------------------ commits, admin

    def check_commit(self, group_id: str, member_id: str, instance_id: str | None,
                     generation: int) -> None:
        """Whether a commit of ``group_id`` from this member and generation is taken: from a
        member of the current generation, or, with generation -1, from a consumer outside
        any group (assign() without subscribe) while the group has no members."""
        g = self.groups.get(group_id)
        if g is None or g.is_(EMPTY, DEAD):
            if generation < 0:
                return
            raise KafkaGroupError(ErrorCode.illegal_generation if g is None or not member_id
                                  else ErrorCode.unknown_member_id)
        _, m = self._member(group_id, member_id, instance_id)
        if generation != g.generation:
            raise KafkaGroupError(ErrorCode.illegal_generation)
        if g.is_(COMPLETING):
            raise KafkaGroupError(ErrorCode.rebalance_in_progress)
        self._keep_alive(g, m)

    def delete(self, group_id: str) -> None:
        """Forget an Empty group; NON_EMPTY_GROUP while it has members."""
        g = self.groups.get(group_id)
        if g is None:
            return
        if g.members or g.pending:
            raise KafkaGroupError(ErrorCode.non_empty_group)
        g.state = DEAD
        del self.groups[group_id]

    # ------------------------------------------------------------------ members

    def _member(self, group_id: str, member_id: str, instance_id: str | None
                ) -> tuple[KafkaGroup, KafkaMember]:
        g = self.groups.get(group_id)
        if g is None or g.is_(EMPTY, DEAD):
            raise KafkaGroupError(ErrorCode.unknown_member_id)
        m = g.members.get(member_id)
        if m is None:
            if instance_id is not None and instance_id in g.static:
                raise KafkaGroupError(ErrorCode.fenced_instance_id)
            raise KafkaGroupError(ErrorCode.unknown_member_id)
        return g, m

    def _keep_alive(self, g: KafkaGroup, m: KafkaMember) -> None:
        self._cancel_expiry(m)
        m.expiry = self.loop.call_later(m.session_timeout_s, self._expire, g, m)

    @staticmethod
    def _cancel_expiry(m: KafkaMember) -> None:
        if m.expiry is not None:
            m.expiry.cancel()
            m.expiry = None

    def _expire(self, g: KafkaGroup, m: KafkaMember) -> None:
        m.expiry = None
        if g.members.get(m.member_id) is not m:
            return
        if m.join_waiter is not None:
            return  # held in a JoinGroup: the rebalance timeout decides
        logger.info("kafka group %r: member %s sent no heartbeat for %.1f s (its session "
                    "timeout); dropped", g.group_id, m.member_id, m.session_timeout_s)
        self._remove(g, m, ErrorCode.unknown_member_id)

    def _forget_pending(self, g: KafkaGroup, member_id: str) -> None:
        g.pending.pop(member_id, None)
        self._try_complete_join(g)

    def _remove(self, g: KafkaGroup, m: KafkaMember, code: ErrorCode,
                rebalance: bool = True) -> None:
        del g.members[m.member_id]
        if m.instance_id is not None and g.static.get(m.instance_id) == m.member_id:
            del g.static[m.instance_id]
        self._cancel_expiry(m)
        if m.join_waiter is not None and not m.join_waiter.done():
            m.join_waiter.set_result(g.answer(m.member_id, code))
        m.join_waiter = None
        self._answer_sync(m, code, b"")
        if g.leader_id == m.member_id:
            g.leader_id = None
        if not g.members:
            g.protocol_type = None
        if not rebalance:
            return
        if g.is_(STABLE, COMPLETING):
            self._prepare_rebalance(g, f"member {m.member_id} left")
        elif g.is_(PREPARING):
            self._try_complete_join(g)

