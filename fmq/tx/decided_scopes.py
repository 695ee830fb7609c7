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
"""

from __future__ import annotations

from collections.abc import Callable

from fmq.errors import TransactionConflict
from fmq.log.record import Record
from fmq.tx.ids import scope_of
from fmq.tx.manager import OpenTransaction, TxManager
from fmq.tx.scope_decision import DECISION_KEY, ScopeDecision, parse_decision


def carries_decision(tx: OpenTransaction) -> bool:
    """Whether the open transaction ``tx`` is a decision mark (one message keyed
    :data:`~fmq.tx.scope_decision.DECISION_KEY`); from memory, no read of the log."""
    return len(tx.messages) == 1 and tx.messages[0].key == DECISION_KEY


class DecidedScopes:
    """The decisions of the open decision marks of one broker."""

    def __init__(self, txm: TxManager, read_record: Callable[[int, int], Record]) -> None:
        self.tx = txm
        self.read_record = read_record
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
            if decided is not None and tx_id in decided.winners:
                raise TransactionConflict(
                    f"transaction {tx_id!r} is to be committed: the decision mark {scope!r} "
                    f"of producer group {producer_group!r} names it, so the broker commits "
                    f"it if its owner does not; nothing to roll back")
            return
        if self.decision(producer_group, tx_id) is None:
            return
        with self.tx.lock:
            pending = self.scope_has_open(producer_group, tx_id)
        if pending:
            raise TransactionConflict(
                f"transaction {tx_id!r} is the decision of the scope {tx_id!r} of producer "
                f"group {producer_group!r}, which still holds open transactions: it ends "
                f"once the broker or its owner has committed the winners and rolled back "
                f"the rest")

    def forget_ended(self) -> None:
        """Drop the decisions of marks no longer open (the maintenance thread)."""
        with self.tx.lock:
            ended = [k for k in self._read
                     if (m := self.tx.open.get(k[:2])) is None or m.prepare_offset != k[2]]
        for k in ended:
            self._read.pop(k, None)
