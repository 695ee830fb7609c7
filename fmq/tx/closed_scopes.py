"""The check-back's decisions of its own: finish a closed scope.

A transaction ``SCOPE//NAME`` still open once the end mark ``SCOPE`` of its producer group
is durable was prepared before the mark (the mark refuses every later PREPARE, under the
lock that registers transactions), and the mark is its owner's durable word on the scope:

* a **decision mark** (:mod:`fmq.tx.scope_decision`), written before the owner's first
  COMMIT, names the winners: the broker commits those it finds open (*rolls them
  forward*: the owner was lost, or its COMMITs failed, after deciding) and rolls back the
  rest, then rolls back the mark itself once its scope holds nothing open;
* a **plain mark** comes only after every COMMIT its owner wanted has answered (or when
  the owner gives the whole scope up), so whatever is still open is a leftover nobody
  wants: the broker rolls it back.

Asking the producer instead would only keep such a transaction open, pinning the recovery
checkpoint and retention, until someone ends it by hand. The broker acts once the
transaction is due for a check-back (``tx_check_after_ms`` after the broker learned of it)
and, in a decided scope, once the decision mark is too (its owner finishes it itself
meanwhile): the same COMMIT or ROLLBACK records a producer's answer writes (fsynced,
shipped to the followers), each logged and counted (docs/transactions.md, *Scopes*). A
primary does this; a follower copies its primary's records, and one promoted finishes
what the old primary left, the decision being in the log it copied.

In a cluster of broker groups a scope's transactions due here with no mark of the scope
here may have been decided in another group (an owner lost between two groups' marks):
the broker asks the other groups' primaries (:mod:`fmq.tx.decisions_elsewhere`), at most
once per ``tx_check_after_ms`` a scope, and writes this group's mark from a decision
found there, which the steps above then carry out. A decision mark naming later groups'
shares ends only once each of them holds a mark of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from fmq.errors import FMQError
from fmq.tx.decided_scopes import DecidedScopes, carries_decision
from fmq.tx.ids import scope_of
from fmq.tx.manager import OpenTransaction, TxManager
from fmq.tx.state import TxState

logger = logging.getLogger("fmq.broker")  # the broker's lines keep one logger name

EndTx = Callable[[str, str], TxState]


class ClosedScopeRollback:
    """Finishes the closed scopes whose open transactions are due for a check-back: rolls
    a decided scope's winners forward and every other leftover back, and ends a decision
    mark whose scope holds nothing open any more. ``commit`` / ``rollback``
    ``(producer_group, tx_id)`` end a transaction as a producer's COMMIT / ROLLBACK does;
    run on a primary only (a follower's primary decides)."""

    def __init__(self, txm: TxManager, rollback: EndTx, check_after_ms: int,
                 commit: EndTx | None = None, decided: DecidedScopes | None = None) -> None:
        self.tx = txm
        self.rollback = rollback
        self.commit = commit
        self.decided = decided
        self.check_after = check_after_ms / 1000.0
        self.rollbacks = 0  # leftovers of closed scopes rolled back
        self.roll_forwards = 0  # winners of decided scopes committed by the broker
        self.decisions_ended = 0  # decision marks the broker ended, their scope finished
        #: When each scope without a mark here may be asked about again (other groups).
        self._next_ask: dict[tuple[str, str], float] = {}

    @property
    def decisions_adopted(self) -> int:
        """Marks written here from another broker group's decision."""
        elsewhere = self.decided.elsewhere if self.decided is not None else None
        return elsewhere.adopted if elsewhere is not None else 0

    def _is_due(self, t: OpenTransaction, now: float) -> bool:
        return t.prepared and t.registered_at + self.check_after <= now

    def due(self, now: float | None = None) -> list[tuple[OpenTransaction, str]]:
        """The open transactions a check-back would ask about now whose scope is closed by
        a durable mark, each with its scope. A transaction being committed (or whose
        prepare is not durable yet) is left alone here; one of a decided scope is listed
        once the decision mark is due as well (and then even while committing: it rolls
        forward)."""
        now = time.monotonic() if now is None else now
        found = []
        with self.tx.lock:
            # One look at the mark per scope: a scope's leftovers are usually many.
            closed: dict[tuple[str, str], bool] = {}
            for t in self.tx.open.values():
                if not self._is_due(t, now):
                    continue
                scope = scope_of(t.tx_id)
                if scope is None:
                    continue
                key = (t.producer_group, scope)
                mark = self.tx.open.get(key)
                if mark is not None and carries_decision(mark):
                    if self._is_due(mark, now):
                        found.append((t, scope))
                    continue
                if t.state != TxState.OPEN or t.referenced:
                    continue
                if key not in closed:
                    closed[key] = self.tx.scope_closed_durably(t.producer_group, scope)
                if closed[key]:
                    found.append((t, scope))
        return found

    def run(self, now: float | None = None) -> int:
        """Finish every transaction :meth:`due` names, then the decision marks whose
        scope holds nothing open; returns how many transactions were ended."""
        now = time.monotonic() if now is None else now
        done = 0
        for tx, scope in self.due(now):
            decision = (self.decided.decision(tx.producer_group, scope)
                        if self.decided is not None else None)
            if decision is not None and tx.tx_id in decision.winners:
                done += self._roll_forward(tx, scope)
            elif tx.state == TxState.OPEN and not tx.referenced:
                done += self._roll_back(tx, scope, decision is not None)
        self._end_decisions(now)
        self._ask_elsewhere(now)
        return done

    def _undecided(self, now: float) -> dict[tuple[str, str], str]:
        """The scopes (group, scope) with a transaction due for a check-back and no mark
        here, each with a topic of one of them (for a mark written here)."""
        found: dict[tuple[str, str], str] = {}
        with self.tx.lock:
            for t in self.tx.open.values():
                if (t.state != TxState.OPEN or t.referenced or not t.messages
                        or not self._is_due(t, now)):
                    continue
                scope = scope_of(t.tx_id)
                if scope is None:
                    continue
                key = (t.producer_group, scope)
                if key in found or key in self.tx.open:
                    continue
                if not self.tx.scope_closed_durably(*key):
                    found[key] = t.messages[0].topic
        return found

    def _ask_elsewhere(self, now: float) -> None:
        """Ask the other broker groups for the decision of each scope open here without a
        mark (module docstring); a group not answering is asked again next time."""
        elsewhere = self.decided.elsewhere if self.decided is not None else None
        if elsewhere is None or not elsewhere.may_ask():
            return
        undecided = self._undecided(now)
        self._next_ask = {k: t for k, t in self._next_ask.items() if k in undecided}
        for (group, scope), topic in undecided.items():
            if self._next_ask.get((group, scope), 0.0) > now:
                continue
            self._next_ask[(group, scope)] = now + self.check_after
            try:
                elsewhere.adopt(group, scope, topic)
            except FMQError as exc:  # a group not asked: its decision may be there
                logger.info("scope %r of producer group %r: its decision is not known here "
                            "yet (%s); asked again later", scope, group, exc)

    def _roll_forward(self, tx: OpenTransaction, scope: str) -> int:
        if self.commit is None:
            return 0
        try:
            self.commit(tx.producer_group, tx.tx_id)
        except FMQError as exc:  # a closed broker, a failed log...
            logger.info("transaction %r of the decided scope %r not committed yet: %s",
                        tx.tx_id, scope, exc)
            return 0
        self.roll_forwards += 1
        logger.warning(
            "committed transaction %r: the decision mark %r of producer group %r names it "
            "for commit, and its owner had not committed it (lost, or its COMMIT failed, "
            "after deciding)", tx.tx_id, scope, tx.producer_group)
        return 1

    def _roll_back(self, tx: OpenTransaction, scope: str, decided: bool) -> int:
        try:
            self.rollback(tx.producer_group, tx.tx_id)
        except FMQError as exc:  # ended meanwhile, a closed broker, a failed log...
            logger.info("transaction %r of the closed scope %r not rolled back: %s",
                        tx.tx_id, scope, exc)
            return 0
        self.rollbacks += 1
        why = ("the scope's decision mark does not name it for commit" if decided else
               f"the transaction {scope!r} marked it over before this one was ended, so "
               f"its owner no longer wants it")
        logger.warning("rolled back transaction %r: its scope %r of producer group %r is "
                       "closed (%s)", tx.tx_id, scope, tx.producer_group, why)
        return 1

    def _end_decisions(self, now: float) -> None:
        """Roll back the due decision marks whose scope holds nothing open: the decision
        is carried out (every winner committed, by its owner or here)."""
        if self.decided is None:
            return
        with self.tx.lock:
            marks = [t for t in self.tx.open.values()
                     if t.state == TxState.OPEN and self._is_due(t, now)
                     and scope_of(t.tx_id) is None and carries_decision(t)]
            finished = [m for m in marks
                        if not self.decided.scope_has_open(m.producer_group, m.tx_id)]
        for mark in finished:
            if not self._later_groups_marked(mark):
                continue
            try:
                self.rollback(mark.producer_group, mark.tx_id)
            except FMQError as exc:
                logger.info("decision mark %r not ended yet: %s", mark.tx_id, exc)
                continue
            self.decisions_ended += 1
            logger.info("ended the decision mark %r of producer group %r: its scope holds "
                        "nothing open any more", mark.tx_id, mark.producer_group)
        self.decided.forget_ended()

    def _later_groups_marked(self, mark: OpenTransaction) -> bool:
        """Whether every later broker group the decision ``mark`` names holds a mark of the
        scope (a decision of one group names none): until then one of them may still
        have to find this decision here."""
        assert self.decided is not None
        decision = self.decided.decision(mark.producer_group, mark.tx_id)
        if decision is None or not decision.groups:
            return True
        elsewhere = self.decided.elsewhere
        try:
            unmarked = (elsewhere.unmarked_groups(mark.producer_group, decision)
                        if elsewhere is not None else sorted(decision.groups))
        except FMQError as exc:
            logger.info("decision mark %r kept: its later broker groups not asked (%s)",
                        mark.tx_id, exc)
            return False
        if unmarked:
            logger.debug("decision mark %r of producer group %r kept: broker groups %s hold "
                        "no mark of its scope yet", mark.tx_id, mark.producer_group,
                        ", ".join(unmarked))
        return not unmarked
