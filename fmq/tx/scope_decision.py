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

Plain values only: a client (the Spark sink's driver) builds the mark with
:func:`decision_message` without any of the broker's storage code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from fmq.message import Message
from fmq.tx.ids import SCOPE_SEPARATOR

#: The key of a decision mark's one message: what tells the broker, from the transaction
#: it keeps in memory (no read of the log), that an open mark carries a decision.
DECISION_KEY = "%scope-decision"


@dataclass(frozen=True)
class ScopeDecision:
    """What a decision mark says: the scope and the ids of its transactions to commit."""

    scope: str
    winners: frozenset[str]


def decision_message(topic: str, scope: str, winners: Iterable[str]) -> Message:
    """The one message of the decision mark of ``scope`` committing ``winners`` (ids of
    the scope, ``SCOPE//NAME``), in ``topic`` (a topic of the broker group holding them:
    the mark is never committed, so never visible there). The same winners give the same
    bytes, so a retried PREPARE of the mark is recognised as the first attempt."""
    ids = sorted(set(winners))
    for tx_id in ids:
        if not tx_id.startswith(scope + SCOPE_SEPARATOR):
            raise ValueError(f"transaction {tx_id!r} is not of the scope {scope!r}")
    body = json.dumps({"scope": scope, "commit": ids}, separators=(",", ":")).encode()
    return Message(topic, body, key=DECISION_KEY)


def parse_decision(scope: str, body: bytes) -> ScopeDecision | None:
    """The decision in the body of the mark ``scope``'s message; None for a body that is
    not a decision of that scope (then the mark only closes the scope)."""
    try:
        value = json.loads(bytes(body))
        winners = value["commit"]
        if value["scope"] != scope or not isinstance(winners, list):
            return None
        prefix = scope + SCOPE_SEPARATOR
        if not all(isinstance(w, str) and w.startswith(prefix) for w in winners):
            return None
    except (ValueError, TypeError, KeyError):
        return None
    return ScopeDecision(scope, frozenset(winners))
