"""The FMQ side of the one-protocol rule of consumer groups across broker groups.

A consumer group is driven by one protocol at a time, FMQ's or the Kafka door's
(docs/kafka.md, *One store, one protocol at a time*). Within one server the two
coordinators ask each other (:attr:`ConsumerGroupCoordinator.foreign_members`). In a
cluster of several broker groups a Kafka group's members are held at its coordinator,
the primary of one broker group, while FMQ's routing consumer joins every broker group
hosting its topics, so an FMQ join that starts a group in this broker group first asks the
broker group coordinating the group's Kafka members (:attr:`GroupStartGate.ask_elsewhere`,
installed by the Kafka door of a node in a cluster). Only a join that *starts* the group
here asks: once the group has FMQ members here, a Kafka JoinGroup at the coordinator asks
this primary (GROUP_MEMBERS) and is refused, so heartbeats and joins of a group already
started never leave the node.

A join being checked counts as a live member while the question is out
(:meth:`GroupStartGate.members`): a Kafka join that asks this node meanwhile is refused.
Each side makes its own join visible before it asks the other, so of two joins of the two
protocols crossing each other at least one sees the other (both may be refused; never both
taken).
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

from fmq.message import check_name
from fmq.server.context import ServerContext
from fmq.server.ops.consumer_groups import ConsumerGroupCoordinator
from fmq.server.ops.joins_in_question import JoinsInQuestion

T = TypeVar("T")
#: (member id, generation, assignment) of a join.
Joined = tuple[str, int, list[tuple[str, int]]]


class GroupStartGate:
    """Joins of FMQ consumers that start a group here, checked with the other broker
    groups first (when :attr:`ask_elsewhere` is set)."""

    def __init__(self, groups: ConsumerGroupCoordinator) -> None:
        self.groups = groups
        #: Raises GroupProtocolConflict when ``group`` has live Kafka members in another
        #: broker group, a retriable error when that cannot be asked now; None: nothing to
        #: ask (a server outside a cluster, or a node without the Kafka door's view).
        self.ask_elsewhere: Callable[[str], Awaitable[None]] | None = None
        self._starting = JoinsInQuestion()

    def members(self, group: str) -> int:
        """Live FMQ members of ``group`` here, joins being checked included."""
        return self.groups.member_count(group) + self._starting.count(group)

    async def join(self, group: str, member_id: str | None, topics: list[str],
                   owner: object) -> Joined:
        """GROUP_JOIN, asked elsewhere first when it would start ``group`` here."""
        return await self._checked(group, lambda: self.groups.join(
            group, member_id, topics, owner))

    async def renew(self, group: str, member_id: str, topics: list[str], owner: object,
                    applied: int | None = None) -> tuple[int, list[tuple[str, int]]]:
        """GROUP_HEARTBEAT / GROUP_SYNC (which join a member the server forgot again: after
        its session expired, or on a new primary), asked elsewhere first when it would
        start ``group`` here."""
        if self.ask_elsewhere is not None:
            self.groups.expire()  # as the heartbeat does: a group of expired members ends
        return await self._checked(group, lambda: self.groups.heartbeat(
            group, member_id, topics, owner, applied))

    async def _checked(self, group: str, join: Callable[[], T]) -> T:
        if self.ask_elsewhere is None or self.groups.member_count(group):
            return join()
        check_name(group, "group", allow_none=False)  # a bad name is refused here, not asked
        with self._starting.asking(group):
            await self.ask_elsewhere(group)
            # No await from here to the member being in the group: it never looks empty.
            return join()


_GATES: weakref.WeakKeyDictionary[ServerContext, GroupStartGate] = weakref.WeakKeyDictionary()


def gate_of(ctx: ServerContext) -> GroupStartGate:
    """The gate of the server whose context is ``ctx``, made at the first use."""
    found = _GATES.get(ctx)
    if found is None:
        found = _GATES[ctx] = GroupStartGate(ctx.groups)
    return found
