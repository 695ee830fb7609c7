"""The open decision marks of a broker (:mod:`fmq.tx.scope_decision`): what each decided,
and the rule a decision adds to ROLLBACK.

From the moment a decision mark's PREPARE is durable its winners are committed, by their
owner or by the broker (:mod:`fmq.tx.closed_scopes`); nobody may roll one back any more,
or the scope would end up partly visible. So, while the mark is open, a ROLLBACK of a
winner is refused (``TransactionConflict``), whoever asks (the owner's abort, a later
write's sweep, ``tx_timeout_ms``, a check-back answer, an operator online), and so is a
ROLLBACK of the mark itself while a transaction of its scope is still open: the mark is
the decision, and it ends once nothing is left to decide. A decision is read from the
log once (its one PRE_MESSAGE's body) and kept while its mark is open.

In a cluster of broker groups the decision of a scope may live in another group only
(its owner lost before writing this group's mark, :mod:`fmq.tx.decisions_elsewhere`): a
ROLLBACK of an open transaction of a scope that has no mark here first asks the other
groups, writes this group's mark from a decision found there and then refuses a winner's
as above; when a group cannot be asked the ROLLBACK is refused as retriable
(``ScopeDecisionUnchecked``), never taken. And the first group's mark, which names later
groups' shares, is not rolled back while one of them holds no mark of the scope yet.
"""

from __future__ import annotations

from collections.abc import Callable

from fmq.errors import TransactionConflict, TransactionInProgress
from fmq.log.record import Record
from fmq.tx.decisions_elsewhere import DecisionsElsewhere
from fmq.tx.ids import scope_of
from fmq.tx.manager import OpenTransaction, TxManager
from fmq.tx.scope_decision import DECISION_KEY, ScopeDecision, parse_decision
from fmq.tx.state import TxState


def carries_decision(tx: OpenTransaction) -> bool:
    """Whether the open transaction ``tx`` is a decision mark (one message keyed
    :data:`~fmq.tx.scope_decision.DECISION_KEY`); from memory, no read of the log."""
    return len(tx.messages) == 1 and tx.messages[0].key == DECISION_KEY


class DecidedScopes:
    """The decisions of the open decision marks of one broker."""

    def __init__(self, txm: TxManager, read_record: Callable[[int, int], Record],
                 elsewhere: DecisionsElsewhere | None = None) -> None:
        self.tx = txm
        self.read_record = read_record
        #: Decisions held by other broker groups (none outside a cluster).
        self.elsewhere = elsewhere
        #: (group, scope, the mark's PREPARE offset) -> its decision (None: not one).
        self._read: dict[tuple[str, str, int], ScopeDecision | None] = {}

    def decision(self, producer_group: str, scope: str) -> ScopeDecision | None:
        """What the open, durable mark ``scope`` of the group decided; None when no such
        mark is open or it decides nothing (a plain end mark)."""
        with self.tx.lock:
            mark = self.tx.open.get((producer_group, scope))
            if mark is None or not mark.prepared or not carries_decision(mark):
                return None
            pre = mark.messages[0]
        key = (producer_group, scope, mark.prepare_offset)
        if key not in self._read:
            self._read[key] = parse_decision(scope, self.read_record(pre.offset, pre.size).body)
        return self._read[key]

    def mark_state(self, producer_group: str, scope: str) -> tuple[bool, bytes | None]:
        """What another broker group asks of this one (:mod:`fmq.tx.decisions_elsewhere`):
        whether a durable mark ``scope`` of the group exists here (open or ended), and
        the body of its message when it is an open decision mark."""
        with self.tx.lock:
            closed = self.tx.scope_closed_durably(producer_group, scope)
            mark = self.tx.open.get((producer_group, scope))
            if mark is None or not mark.prepared or not carries_decision(mark):
                return closed, None
            pre = mark.messages[0]
        return closed, bytes(self.read_record(pre.offset, pre.size).body)

    def scope_has_open(self, producer_group: str, scope: str) -> bool:
        """Whether a transaction ``scope//...`` of the group is open (lock held by the
        caller)."""
        return any(g == producer_group and scope_of(i) == scope for g, i in self.tx.open)

    def check_rollback(self, producer_group: str, tx_id: str) -> None:
        """Refuse the ROLLBACK of a decided winner, and of a decision mark whose scope
        still holds an open transaction (module docstring)."""
        scope = scope_of(tx_id)
        if scope is not None:
            decided = self.decision(producer_group, scope)
            if decided is None and self._adopt_for(producer_group, tx_id, scope):
                decided = self.decision(producer_group, scope)
            if decided is None:
                self._check_mark_written(producer_group, scope)
            if decided is not None and tx_id in decided.winners:
                raise TransactionConflict(
                    f"transaction {tx_id!r} is to be committed: the decision mark {scope!r} "
                    f"of producer group {producer_group!r} names it, so the broker commits "
                    f"it if its owner does not; nothing to roll back")
            return
        decided = self.decision(producer_group, tx_id)
        if decided is None:
            return
        with self.tx.lock:
            pending = self.scope_has_open(producer_group, tx_id)
        unmarked = ([] if pending or self.elsewhere is None or not decided.groups
                    else self.elsewhere.unmarked_groups(producer_group, decided))
        if unmarked:
            raise TransactionConflict(
                f"transaction {tx_id!r} is the decision of the scope {tx_id!r} of producer "
                f"group {producer_group!r} over several broker groups, and broker groups "
                f"{', '.join(unmarked)} hold no mark of it yet (or could not be asked): it "
                f"ends once each has written its own, from this decision if need be")
        if pending:
            raise TransactionConflict(
                f"transaction {tx_id!r} is the decision of the scope {tx_id!r} of producer "
                f"group {producer_group!r}, which still holds open transactions: it ends "
                f"once the broker or its owner has committed the winners and rolled back "
                f"the rest")

    def _check_mark_written(self, producer_group: str, scope: str) -> None:
        """Refuse (retriable) while the scope's mark is being written: it may be the
        decision naming the transaction."""
        with self.tx.lock:
            mark = self.tx.open.get((producer_group, scope))
            writing = mark is not None and not mark.prepared
        if writing:
            raise TransactionInProgress(
                f"the end mark {scope!r} of producer group {producer_group!r} is being "
                f"written, and may decide to commit this transaction; retry the rollback "
                f"once it is stored")

    def _adopt_for(self, producer_group: str, tx_id: str, scope: str) -> bool:
        """Before a ROLLBACK of the open transaction ``tx_id`` of a scope with no mark here:
        whether another broker group's decision of the scope was found (and this group's
        mark written from it). Raises ``ScopeDecisionUnchecked`` when a group could not be
        asked."""
        if self.elsewhere is None or not self.elsewhere.may_ask():
            return False
        with self.tx.lock:
            tx = self.tx.open.get((producer_group, tx_id))
            if (tx is None or tx.state != TxState.OPEN or not tx.messages
                    or (producer_group, scope) in self.tx.open
                    or self.tx.scope_closed_durably(producer_group, scope)):
                return False  # ended, being committed, or the scope has its mark here
            topic = tx.messages[0].topic
        return self.elsewhere.adopt(producer_group, scope, topic)

    def forget_ended(self) -> None:
        """Drop the decisions of marks no longer open (the maintenance thread)."""
        with self.tx.lock:
            ended = [k for k in self._read
                     if (m := self.tx.open.get(k[:2])) is None or m.prepare_offset != k[2]]
        for k in ended:
            self._read.pop(k, None)
