"""A scope's decision: the end mark that says, before the first COMMIT, which of the
scope's transactions are to be committed (docs/transactions.md, *Scopes*).

An end mark ``SCOPE`` (the transaction whose id is a scope, :mod:`fmq.tx.ids`) closes the
scope; a *decision mark* also decides it. It is an ordinary prepared transaction of one
message whose key is :data:`DECISION_KEY` and whose body is the JSON
``{"scope": SCOPE, "commit": [TX_ID, ...]}``: the ids of the scope's transactions its
owner commits (the *winners*). Every other transaction of the scope is a loser. While the
mark is open the broker finishes the decision on its own (COMMIT for the winners,
ROLLBACK for the losers, then ROLLBACK of the mark: :mod:`fmq.tx.closed_scopes`) and
refuses a ROLLBACK of a winner (:mod:`fmq.tx.decided_scopes`). Being a PREPARE and a
PRE_MESSAGE, the decision is fsynced and replicated before its prepare answers, and found
again by recovery and by a promoted follower.

**Over several broker groups** (a scope whose transactions live in several groups of a
cluster, each group with its own log) the owner writes one mark per group, in one order,
and the *first* is the commit point of the whole scope: besides its own group's winners it
names, per later broker group holding winners, that group's winners and the topic its
mark goes to (:class:`GroupShare`, the body's ``"groups"``, present even when empty: a
later group it does not name holds no winner). A later group whose mark never came (the
owner lost between two groups' marks) finds that decision in the first group and writes
its own mark from it, the same bytes the owner would have written
(:mod:`fmq.tx.decisions_elsewhere`).

Plain values only: a client (the Spark sink's driver) builds the mark with
:func:`decision_message` without any of the broker's storage code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fmq.message import Message
from fmq.tx.ids import SCOPE_SEPARATOR

#: The key of a decision mark's one message: what tells the broker, from the transaction
#: it keeps in memory (no read of the log), that an open mark carries a decision.
DECISION_KEY = "%scope-decision"


@dataclass(frozen=True)
class GroupShare:
    """A later broker group's part of a decision made in the first: the topic its own
    mark goes to and its winners."""

    topic: str
    winners: frozenset[str]


@dataclass(frozen=True)
class ScopeDecision:
    """What a decision mark says: the scope and the ids of its transactions to commit in
    the mark's broker group, and (the first group's mark of a scope over several) each
    later broker group's share."""

    scope: str
    winners: frozenset[str]
    #: The later broker groups' shares (only those with winners); None: the decision of
    #: one broker group, which says nothing of any other.
    groups: Mapping[str, GroupShare] | None = None

    def share_of(self, broker_group: str, topic: str) -> GroupShare:
        """``broker_group``'s share of this decision (one over several groups): the one it
        names, else none of the scope's transactions there is a winner (the mark names
        every later group the owner chose a transaction in), with ``topic`` for the
        mark."""
        return (self.groups or {}).get(broker_group) or GroupShare(topic, frozenset())


def _ids(scope: str, winners: Iterable[str]) -> list[str]:
    ids = sorted(set(winners))
    for tx_id in ids:
        if not tx_id.startswith(scope + SCOPE_SEPARATOR):
            raise ValueError(f"transaction {tx_id!r} is not of the scope {scope!r}")
    return ids


def decision_message(topic: str, scope: str, winners: Iterable[str],
                     groups: Mapping[str, GroupShare] | None = None) -> Message:
    """The one message of the decision mark of ``scope`` committing ``winners`` (ids of
    the scope, ``SCOPE//NAME``), in ``topic`` (a topic of the broker group holding them:
    the mark is never committed, so never visible there). ``groups``: in the first broker
    group's mark of a scope over several, the later groups' shares, those with winners
    (possibly none: ``{}`` still says the decision is over several groups). The same decision
    gives the same bytes, so a retried PREPARE of the mark is recognised as the first
    attempt."""
    value: dict = {"scope": scope, "commit": _ids(scope, winners)}
    if groups is not None:
        value["groups"] = {g: {"topic": share.topic, "commit": _ids(scope, share.winners)}
                           for g, share in sorted(groups.items())}
    body = json.dumps(value, separators=(",", ":")).encode()
    return Message(topic, body, key=DECISION_KEY)


def share_message(scope: str, share: GroupShare) -> Message:
    """The mark a later broker group writes from the first group's decision: the message
    its owner would have written there (:func:`decision_message` of the share)."""
    return decision_message(share.topic, scope, share.winners)


def parse_decision(scope: str, body: bytes) -> ScopeDecision | None:
    """The decision in the body of the mark ``scope``'s message; None for a body that is
    not a decision of that scope (then the mark only closes the scope)."""
    try:
        value = json.loads(bytes(body))
        if value["scope"] != scope:
            return None
        winners = _winners(scope, value["commit"])
        shares = value.get("groups")
        groups = None if shares is None else {
            g: GroupShare(s["topic"], _winners(scope, s["commit"])) for g, s in shares.items()}
        if winners is None or groups is not None and (
                None in (s.winners for s in groups.values()) or not all(
                    isinstance(g, str) and isinstance(s.topic, str)
                    for g, s in groups.items())):
            return None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return ScopeDecision(scope, winners, groups)


def _winners(scope: str, ids: object) -> frozenset[str] | None:
    prefix = scope + SCOPE_SEPARATOR
    if not isinstance(ids, list) or not all(isinstance(w, str) and w.startswith(prefix)
                                             for w in ids):
        return None
    return frozenset(ids)
