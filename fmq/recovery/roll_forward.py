"""Recovery's last pass, run once the log is writable again: end the transactions a crash
left half-way through their prepare or their commit.

* A prepare a crash cut short can never be committed (the client was never told it was
  stored): it is rolled back with a ROLLBACK record.
* A commit a crash cut short (REF/TX records durable, no COMMIT) is rolled forward: the
  missing REF/TX records and the COMMIT are written. A committing transaction cannot be
  incomplete (its commit was asked after the prepare was durable); should one be, what
  the log holds is committed.
"""

from __future__ import annotations

import logging

from fmq.recovery.recover import RecoveryReport
from fmq.tx.manager import TxManager
from fmq.tx.state import TxState
from fmq.tx.writer import TxWriter

logger = logging.getLogger("fmq.broker")  # the broker's lines keep one logger name


def end_cut_transactions(txm: TxManager, writer: TxWriter, report: RecoveryReport) -> None:
    """Roll back cut prepares, roll forward cut commits (listed in
    ``report.rolled_forward``), and count the transactions left open for feedback."""
    for tx in [t for t in txm.open.values()
               if not t.complete and t.state != TxState.COMMITTING]:
        logger.warning("rolling back transaction %r of group %r: a crash cut its prepare "
                       "short (%d of %d messages in the log)", tx.tx_id,
                       tx.producer_group, len(tx.messages), tx.expected_messages)
        writer.write_rollback(tx)
    for tx in [t for t in txm.open.values() if t.state == TxState.COMMITTING]:
        if not tx.complete:
            logger.error("transaction %r is committing but its prepare is incomplete "
                         "(%d of %d messages): committing what the log holds", tx.tx_id,
                         len(tx.messages), tx.expected_messages)
        tx.prepared = True
        writer.commit_tx(tx)
        report.rolled_forward.append(tx.tx_id)
    report.open_transactions = len(txm.open)
