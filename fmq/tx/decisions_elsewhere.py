"""A scope's decision held by another broker group of the cluster (docs/transactions.md,
*Scopes*, *Over several broker groups*).

An owner whose scope spans broker groups writes one decision mark per group, the first
(:mod:`fmq.tx.scope_decision`) naming every later group's share. An owner lost between
two groups' marks leaves the later groups' transactions open with no mark of their own;
the decision is made all the same (the first mark is durable, its winners are committed
by the first group's broker). So a primary that finds a transaction of a scope open with
no mark of the scope here asks the other broker groups' primaries whether one holds the
scope's decision, and if one does, writes this group's mark from it: the PREPARE its owner
would have written (the same bytes, so the owner's own retried mark is answered as this
one). From then on the local rules apply unchanged (:mod:`fmq.tx.closed_scopes`,
:mod:`fmq.tx.decided_scopes`): the winners are committed, the rest of the scope here
rolled back, a ROLLBACK of a winner refused, and the scope closed to later PREPAREs.

The broker never decides alone: a scope no group holds a decision of is left as it is
(open, offered to the check-back), and one a group could not be asked about (no primary,
out of reach) is asked again later, never taken as undecided. The first group's mark
stays open (its broker does not end it, and refuses its ROLLBACK) until every later group
it names holds a mark of the scope, so a later group that asks always finds it.

The engine knows no network: the server gives a :class:`OtherBrokerGroups` (its links to
the other groups' primaries) to :attr:`DecisionsElsewhere.groups` in a cluster; outside a
cluster (or an embedded broker, ``fmq tx resolve`` offline) there is none and nothing is
asked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from fmq.errors import DuplicateTransaction, TransactionInProgress
from fmq.message import Message
from fmq.tx.manager import TxManager
from fmq.tx.scope_decision import ScopeDecision, parse_decision, share_message

logger = logging.getLogger("fmq.broker")  # the broker's lines keep one logger name

Prepare = Callable[[Sequence[Message], str, str], str]


class OtherBrokerGroups(Protocol):
    """The other broker groups of the cluster, as this node reaches their primaries."""

    #: This node's broker group.
    own_group: str

    def decision(self, producer_group: str, scope: str) -> tuple[str, bytes] | None:
        """The broker group holding an open decision mark ``scope`` of ``producer_group``
        that names other groups' shares, and the mark's body; None when every other group
        answered without one. Raises ``ScopeDecisionUnchecked`` (retriable) when none of
        those that answered holds it and one could not be asked."""

    def without_mark(self, producer_group: str, scope: str, groups: Sequence[str]
                     ) -> list[str]:
        """Those of ``groups`` that hold no durable mark ``scope`` of ``producer_group``
        (open or ended), a group that could not be asked included."""


class DecisionsElsewhere:
    """Finds a scope's decision in the other broker groups and writes this group's mark
    from it (module docstring). ``prepare(messages, producer_group, tx_id)`` prepares a
    transaction as a producer's PREPARE does."""

    def __init__(self, txm: TxManager, prepare: Prepare) -> None:
        self.tx = txm
        self.prepare = prepare
        #: The server's links to the other broker groups; None outside a cluster.
        self.groups: OtherBrokerGroups | None = None
        self.adopted = 0  # marks written here from another group's decision

    def may_ask(self) -> bool:
        return self.groups is not None

    def adopt(self, producer_group: str, scope: str, topic: str) -> bool:
        """Write this group's mark of ``scope`` from the decision another broker group
        holds; ``topic``: a topic of this group for the mark when the decision names no
        share here (then none of the scope's transactions here is a winner). True when the
        scope has a mark here now; False when no group holds its decision (or this node is
        in no cluster). Raises ``ScopeDecisionUnchecked`` when a group could not be
        asked."""
        groups = self.groups
        if groups is None:
            return False
        found = groups.decision(producer_group, scope)
        if found is None:
            return False
        where, body = found
        decision = parse_decision(scope, body)
        if decision is None or decision.groups is None:
            return False  # not a decision over several groups: it says nothing of this one
        share = decision.share_of(groups.own_group, topic)
        try:
            self.prepare([share_message(scope, share)], producer_group, scope)
        except (DuplicateTransaction, TransactionInProgress):
            return True  # the owner's own mark, written meanwhile
        self.adopted += 1
        logger.warning(
            "wrote the decision mark %r of producer group %r in this broker group (%d "
            "transactions to commit) from the decision broker group %r holds: its owner was "
            "lost before writing it here", scope, producer_group, len(share.winners), where)
        return True

    def unmarked_groups(self, producer_group: str, decision: ScopeDecision) -> list[str]:
        """The later broker groups ``decision`` (this group's) names that hold no mark of
        its scope yet: until they do, the mark stays (they may still have to find it).
        Without links to them (no cluster), every one of them."""
        later = sorted(g for g in decision.groups or {} if self.groups is None
                       or g != self.groups.own_group)
        if not later:
            return []
        if self.groups is None:
            return later
        return self.groups.without_mark(producer_group, decision.scope, later)
