"""The check-back's one decision of its own: roll back the leftovers of a closed scope.

A transaction ``SCOPE//NAME`` still open once the end mark ``SCOPE`` of its producer group
is durable was prepared before the mark (the mark refuses every later PREPARE, under the
lock that registers transactions), and whoever owns the scope closed it only after ending
every transaction it wanted (the Spark sink commits its winners first, or gives the whole
write up). So nobody can still want it committed: the mark is the owner's own durable
decision about everything left in the scope, and asking the producer again would only
keep the transaction open, pinning the recovery checkpoint and retention, until someone
ends it by hand. When such a transaction falls due for a check-back
(``tx_check_after_ms`` after the broker learned of it), the broker rolls it back instead
of offering it: the same ROLLBACK record a producer's answer writes (fsynced, shipped to
the followers), logged and counted (docs/transactions.md, *Scopes*).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from fmq.errors import FMQError
from fmq.tx.ids import scope_of
from fmq.tx.manager import OpenTransaction, TxManager
from fmq.tx.state import TxState

logger = logging.getLogger("fmq.broker")  # the broker's lines keep one logger name


class ClosedScopeRollback:
    """Rolls back the open transactions of closed scopes that are due for a check-back.
    ``rollback(producer_group, tx_id)`` ends a transaction as a producer's ROLLBACK does;
    run on a primary only (a follower's primary decides)."""

    def __init__(self, txm: TxManager, rollback: Callable[[str, str], TxState],
                 check_after_ms: int) -> None:
        self.tx = txm
        self.rollback = rollback
        self.check_after = check_after_ms / 1000.0
        self.rollbacks = 0  # leftovers of closed scopes rolled back

    def due(self, now: float | None = None) -> list[tuple[OpenTransaction, str]]:
        """The open transactions a check-back would ask about now whose scope is closed by
        a durable mark, each with its scope. A transaction being committed (or whose
        prepare is not durable yet) is left alone."""
        now = time.monotonic() if now is None else now
        found = []
        with self.tx.lock:
            # One look at the mark per scope: a scope's leftovers are usually many.
            closed: dict[tuple[str, str], bool] = {}
            for t in self.tx.open.values():
                if (t.state != TxState.OPEN or not t.prepared
                        or t.registered_at + self.check_after > now):
                    continue
                scope = scope_of(t.tx_id)
                if scope is None or t.referenced:
                    continue
                key = (t.producer_group, scope)
                if key not in closed:
                    closed[key] = self.tx.scope_closed_durably(t.producer_group, scope)
                if closed[key]:
                    found.append((t, scope))
        return found

    def run(self, now: float | None = None) -> int:
        """Roll back every transaction :meth:`due` names; returns how many were."""
        done = 0
        for tx, scope in self.due(now):
            try:
                self.rollback(tx.producer_group, tx.tx_id)
            except FMQError as exc:  # ended meanwhile, a closed broker, a failed log...
                logger.info("transaction %r of the closed scope %r not rolled back: %s",
                            tx.tx_id, scope, exc)
                continue
            done += 1
            self.rollbacks += 1
            logger.warning(
                "rolled back transaction %r: its scope %r of producer group %r is closed "
                "(the transaction %r marked it over before this one was ended), so its "
                "owner no longer wants it", tx.tx_id, scope, tx.producer_group, scope)
        return done
