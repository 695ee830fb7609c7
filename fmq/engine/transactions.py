"""A broker's transactions as one facade (``Broker.transactions``): prepare, commit and
rollback, blocking or in two halves for a send pipeline (place now, finish once the flush
covers the records), the feedback of open transactions, and the list of open ones.

The records themselves are written by :class:`fmq.tx.writer.TxWriter`; the open
transactions live in :class:`fmq.tx.manager.TxManager`. Callers outside the engine use this
class, never those two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fmq.log.placement import now_ms
from fmq.message import Message
from fmq.tx.decided_scopes import DecidedScopes
from fmq.tx.decisions_elsewhere import DecisionsElsewhere
from fmq.tx.feedback import Feedback
from fmq.tx.manager import OpenTransaction, TxManager
from fmq.tx.state import TxState, UncertainTx
from fmq.tx.writer import TxWriter


class Transactions:
    """The transaction operations of one open broker."""

    def __init__(self, *, manager: TxManager, writer: TxWriter, feedback: Feedback,
                 check_open: Callable[[], None], decided: DecidedScopes | None = None) -> None:
        self._manager = manager
        #: Refuses a ROLLBACK that would undo a scope's decision (docs/transactions.md).
        self._decided = decided
        #: Scope decisions held by other broker groups: the server gives it its links to
        #: them in a cluster (``groups``); None for a broker without decisions.
        self.decisions_elsewhere: DecisionsElsewhere | None = (
            decided.elsewhere if decided is not None else None)
        self._writer = writer
        self._feedback = feedback
        self._check_open = check_open  # raises BrokerClosed once the broker is closed

    # ------------------------------------------------------------------ blocking

    def prepare(self, messages: Sequence[Message], producer_group: str,
                tx_id: str | None = None) -> str:
        """Store ``messages`` as a prepared transaction; nothing is consumable until commit.
        Returns the transaction id once PREPARE and every PRE_MESSAGE are durable."""
        self._check_open()
        return self._writer.prepare(messages, producer_group, tx_id)

    def commit(self, tx_id: str, producer_group: str | None = None) -> TxState:
        """Make every message of ``producer_group``'s transaction ``tx_id`` consumable
        (REF/TX records, then COMMIT); idempotent. No group: the one that used the id (a
        trusted caller's shortcut; the server always names the group)."""
        self._check_open()
        return self._writer.commit(producer_group or self._manager.group_of(tx_id), tx_id)

    def rollback(self, tx_id: str, producer_group: str | None = None) -> TxState:
        """Discard ``producer_group``'s transaction ``tx_id`` (ROLLBACK record). Idempotent;
        a conflict after commit. No group: as :meth:`commit`."""
        self._check_open()
        group = producer_group or self._manager.group_of(tx_id)
        if self._decided is not None:
            self._decided.check_rollback(group, tx_id)
        return self._writer.rollback(group, tx_id)

    # ------------------------------------------------------------------ on a pipeline

    def place_prepare(self, messages: Sequence[Message], producer_group: str,
                      tx_id: str | None = None) -> tuple[OpenTransaction, int]:
        """The first half of :meth:`prepare`, never waiting for the disk: returns the
        transaction and the log offset its records end at (see
        :meth:`fmq.tx.writer.TxWriter.place_prepare`)."""
        return self._writer.place_prepare(messages, producer_group, tx_id)

    def place_prepares(self, requests: Sequence[tuple[Sequence[Message], str, str | None]]
                       ) -> list[tuple[OpenTransaction, int] | Exception]:
        """:meth:`place_prepare` of a turn's PREPAREs of plain messages, each one's outcome
        (:meth:`fmq.tx.writer.TxWriter.place_prepares`)."""
        return self._writer.place_prepares(requests)

    def place_commits(self, requests: Sequence[tuple[str, str]]
                      ) -> list[TxState | tuple[OpenTransaction, int] | None | Exception]:
        """:meth:`place_commit` of a turn's COMMITs, each one's outcome
        (:meth:`fmq.tx.writer.TxWriter.place_commits`)."""
        return self._writer.place_commits(requests)

    def prepare_done(self, tx: OpenTransaction, failure: BaseException | None = None) -> str:
        """The second half of :meth:`prepare`, once its records are durable (or failed)."""
        return self._writer.prepare_done(tx, failure)

    def prepares_done(self, txs: list[OpenTransaction], failure: BaseException | None = None
                      ) -> list[str]:
        """:meth:`prepare_done` of several transactions one flush covered, in order."""
        return self._writer.prepares_done(txs, failure)

    def place_commit(self, producer_group: str, tx_id: str
                     ) -> TxState | tuple[OpenTransaction, int] | None:
        """The first half of :meth:`commit`, never blocking (see
        :meth:`fmq.tx.writer.TxWriter.place_commit` for its three answers)."""
        return self._writer.place_commit(producer_group, tx_id)

    def commit_done(self, tx: OpenTransaction, failure: BaseException | None = None) -> None:
        """The second half of :meth:`place_commit`, once its COMMIT is durable (or failed)."""
        self._writer.commit_done(tx, failure)

    def commits_done(self, txs: list[OpenTransaction], failure: BaseException | None = None
                     ) -> list[None]:
        """:meth:`commit_done` of several transactions one flush covered, in order."""
        return self._writer.commits_done(txs, failure)

    # ------------------------------------------------------------------ feedback

    def poll_uncertain(self, producer_group: str, max_items: int = 16, lease_ms: int = 5000,
                       wait_ms: int = 0, owner: object = None) -> list[UncertainTx]:
        """Open transactions of ``producer_group`` older than ``tx_check_after_ms`` and not
        leased to another poller, with their messages; see
        :meth:`fmq.tx.feedback.Feedback.poll_uncertain`."""
        self._check_open()
        return self._feedback.poll_uncertain(producer_group, max_items, lease_ms, wait_ms, owner)

    def answer_uncertain(self, tx_id: str, state: TxState, owner: object = None,
                         producer_group: str | None = None) -> TxState:
        """A producer's answer to a feedback offer of ``producer_group``'s transaction
        ``tx_id``: commit, rollback or unknown (without a group, as :meth:`commit`)."""
        return self._feedback.answer_uncertain(producer_group or None, tx_id, state, owner)

    def release_feedback_leases(self, owner: object) -> int:
        """Return every feedback lease ``owner`` holds (its connection closed): those
        transactions are offered to the next poll at once. Returns how many."""
        return self._feedback.release_leases(owner)

    def scope_mark(self, producer_group: str, scope: str) -> tuple[bool, bytes | None]:
        """Whether a durable end mark ``scope`` of ``producer_group`` exists here, and the
        body of its message when it is an open decision mark (another broker group asks,
        docs/transactions.md, *Scopes*)."""
        self._check_open()
        if self._decided is None:
            return False, None
        return self._decided.mark_state(producer_group, scope)

    def open_transactions(self) -> list[dict]:
        """Open transactions, oldest first: id, group, state, age, checks, messages, offset."""
        return self._manager.list_open(now_ms())
