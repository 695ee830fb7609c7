"""The transaction manager: open transactions in memory, finished ids remembered, feedback
leases handed out.

A transaction is known by its producer group and its id together (:data:`TxKey`): the same
id in two groups is two transactions, and nothing said about one group's transaction (open,
committed, rolled back) depends on another group's.

It holds state only; :mod:`fmq.tx.writer` writes the log records and calls in here.
Everything it knows is rebuilt by recovery's redo pass from PREPARE / PRE_MESSAGE / REF /
TX / COMMIT / ROLLBACK records.

Feedback timing uses the monotonic clock, so a wall-clock jump neither hides a
transaction from the check-back nor offers it early.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from fmq import native
from fmq.errors import (
    DuplicateTransaction,
    InvalidArgument,
    TooManyTransactions,
    TransactionConflict,
    TransactionInProgress,
    TransactionRolledBack,
    TransactionScopeClosed,
    UnknownTransaction,
)
from fmq.message import check_label
from fmq.tx import open_transaction as open_transaction_py
from fmq.tx.ids import scope_of
from fmq.tx.open_transaction import TxKey
from fmq.tx.scope_decision import DECISION_KEY
from fmq.tx.state import TxState

#: The classes of :mod:`fmq.tx.open_transaction` that run: compiled where built (one pair
#: per process: every module takes them from here).
_OPEN = native.choose(open_transaction_py)
PreMessage = _OPEN.PreMessage
OpenTransaction = _OPEN.OpenTransaction


class TxManager:
    def __init__(self, max_open: int, finished_memory: int, check_after_ms: int,
                 check_max_interval_ms: int,
                 lookup_finished: Callable[[str, str], TxState | None] | None = None,
                 lookup_groups: Callable[[str], list[str]] | None = None) -> None:
        self.max_open = max_open
        self.finished_memory = finished_memory
        self.check_after = check_after_ms / 1000.0
        self.check_max_interval = check_max_interval_ms / 1000.0
        self.open: dict[TxKey, OpenTransaction] = {}
        #: Recovery only: relocated copies of open transactions, read so far; one replaces
        #: its original once all its PRE_MESSAGEs are read (an interrupted relocation
        #: never replaces a whole original with a part).
        self.relocating: dict[TxKey, OpenTransaction] = {}
        self.finished: OrderedDict[TxKey, TxState] = OrderedDict()
        self.lock = threading.Lock()
        self._uncertain = threading.Condition(self.lock)
        self.checks_sent = 0
        #: Pollers waiting in poll_uncertain, and the latest time one of them sleeps until
        #: (monotonic; stale-high once they leave, which only costs a spare wake-up).
        self._waiting = 0
        self._latest_wake = 0.0
        #: Prepares that woke the waiting pollers (most need not: see :meth:`prepared`).
        self.poller_wakeups = 0
        #: Where ends older than this process are found (the index's transaction ends):
        #: by (group, id), and the groups that ended an id.
        self.lookup_finished = lookup_finished
        self.lookup_groups = lookup_groups

    def _finished_state(self, key: TxKey) -> TxState | None:
        state = self.finished.get(key)
        if state is None and self.lookup_finished is not None:
            state = self.lookup_finished(*key)
        return state

    def open_by_id(self, tx_id: str) -> OpenTransaction | None:
        """The open transaction ``tx_id`` of whichever group (lock held by the caller):
        recovery's way to a REF or TX record of a log written before they named their
        group, when ids were unique across groups."""
        return next((t for t in self.open.values() if t.tx_id == tx_id), None)

    def group_of(self, tx_id: str) -> str:
        """The producer group of the transaction ``tx_id``, for a trusted caller that did
        not name one (embedded use, an operator): open, else ended. Raises when no group
        or several groups have used the id."""
        check_label(tx_id, "tx_id", allow_none=False)
        with self.lock:
            groups = {g for g, i in self.open if i == tx_id}
            if not groups:
                groups = {g for g, i in self.finished if i == tx_id}
        if not groups and self.lookup_groups is not None:
            groups = set(self.lookup_groups(tx_id))
        if len(groups) == 1:
            return groups.pop()
        if not groups:
            raise _unknown(tx_id)
        raise InvalidArgument(
            f"transaction id {tx_id!r} is used by the producer groups "
            f"{', '.join(sorted(groups))}; name the producer group")

    # ------------------------------------------------------------------ lifecycle

    def reserve(self, producer_group: str, tx_id: str, fresh: bool = False) -> None:
        """Check limits before a PREPARE is written (lock held by the caller); ``fresh``:
        the broker made the id just now, no earlier transaction can have it (the index is
        not asked). Only ``producer_group``'s transactions can make an id used.

        A used id gets an answer a retrying client can act on: still being written
        (retry), rolled back (prepare again under a new id: nothing of it is stored), or
        fully prepared (the earlier attempt is stored)."""
        if fresh:  # no transaction, open or ended, has the id: only the limit applies
            self._check_room()
            return
        key = (producer_group, tx_id)
        tx = self.open.get(key)
        if tx is not None and not tx.prepared:
            raise TransactionInProgress(
                f"transaction {tx_id!r} is being prepared by an earlier request; retry "
                f"shortly to learn whether it is stored")
        final = None if tx is not None else self._finished_state(key)
        if final == TxState.ROLLBACK:
            raise TransactionRolledBack(
                f"transaction {tx_id!r} was rolled back (nothing of it is stored, e.g. a "
                f"crash cut its prepare short); prepare the messages again under a new "
                f"transaction id")
        if tx is not None or final is not None:
            raise DuplicateTransaction(
                f"transaction id {tx_id!r} is already prepared "
                f"({tx.state.value if tx is not None else final.value}); let the client "
                f"generate ids or make yours unique"
            )
        self._check_scope_open(producer_group, tx_id)
        self._check_room()

    def _check_room(self) -> None:
        """Refuse one more open transaction past ``max_open_transactions``."""
        if len(self.open) >= self.max_open:
            raise TooManyTransactions(
                f"{len(self.open)} transactions are open, the limit (max_open_transactions) "
                f"is {self.max_open}; commit or roll back some, or raise the limit"
            )

    def _check_scope_open(self, producer_group: str, tx_id: str) -> None:
        """Refuse ``SCOPE//NAME`` once ``SCOPE`` (same group) has been prepared (lock held
        by the caller). The mark is checked under the lock that registers transactions,
        so a PREPARE either registers before the mark (whoever closed the scope then
        finds it open) or is refused; the mark's end is in the log and the index, so the
        refusal survives restarts (docs/transactions.md, *Scopes*)."""
        scope = scope_of(tx_id)
        if scope is None:
            return
        key = (producer_group, scope)
        if key in self.open or self._finished_state(key) is not None:
            raise TransactionScopeClosed(
                f"transaction {tx_id!r} belongs to the scope {scope!r} of producer group "
                f"{producer_group!r}, which is closed (the transaction {scope!r} marked it "
                f"over): the work it belongs to was already committed or given up, so "
                f"nothing of it is stored")

    def closed_scope_of(self, producer_group: str, tx_id: str) -> str | None:
        """The scope of ``tx_id`` when a durable end mark closes it (lock held by the
        caller, :meth:`scope_closed_durably`); None for an id without a scope or an open
        scope."""
        scope = scope_of(tx_id)
        return scope if scope is not None and self.scope_closed_durably(
            producer_group, scope) else None

    def scope_closed_durably(self, producer_group: str, scope: str) -> bool:
        """Whether the end mark ``scope`` of the group is durable (lock held by the
        caller): prepared (its PREPARE fsynced) or ended; not while its PREPARE is still
        being written (it may yet fail). A transaction still open in such a scope was
        prepared before the mark (the mark refuses every later PREPARE under this lock),
        and the owner ended all it wanted before marking the scope over: it is a
        leftover, which the broker rolls back (:mod:`fmq.tx.closed_scopes`) instead of
        asking about."""
        key = (producer_group, scope)
        mark = self.open.get(key)
        if mark is not None:
            return mark.prepared
        return self._finished_state(key) is not None

    def register(self, tx: OpenTransaction) -> None:
        tx.next_check_at = tx.registered_at + self.check_after
        self.open[tx.producer_group, tx.tx_id] = tx  # tx.key, without the property's call

    def get_for_end(self, producer_group: str, tx_id: str, wanted: TxState
                    ) -> OpenTransaction | TxState:
        """The open transaction to commit/roll back, or its final state when it already
        ended that way. Raises on conflict or an unknown id (lock held by the caller): an
        id this group never used is unknown, whatever other groups did with it, and
        asking about it records nothing."""
        key = (producer_group, tx_id)
        tx = self.open.get(key)
        if tx is not None:
            if not tx.prepared:
                raise TransactionInProgress(
                    f"transaction {tx_id!r} is still being prepared; end it once its "
                    f"prepare has answered")
            if wanted == TxState.ROLLBACK and (tx.state == TxState.COMMITTING or tx.referenced):
                raise TransactionConflict(
                    f"transaction {tx_id!r} is committing (its messages are being made "
                    f"visible); it can only be committed"
                )
            return tx
        final = self._finished_state(key)
        if final is None:
            raise _unknown(tx_id)
        if final != wanted:
            raise TransactionConflict(
                f"transaction {tx_id!r} was already ended with {final.value}; it cannot be "
                f"ended with {wanted.value}"
            )
        return final

    def finish(self, key: TxKey, state: TxState) -> None:
        self.finish_all((key,), state)

    def finish_all(self, keys: Sequence[TxKey], state: TxState) -> None:
        """Each of ``keys`` ended with ``state``, in order (lock held by the caller): no
        longer open, remembered among the finished ones (one call for the COMMITs one
        flush covered)."""
        is_open, finished, memory = self.open, self.finished, self.finished_memory
        for key in keys:
            is_open.pop(key, None)
            if memory:
                finished[key] = state
                finished.move_to_end(key)
                while len(finished) > memory:
                    finished.popitem(last=False)

    def forget(self, key: TxKey) -> None:
        """Drop a transaction whose prepare failed, remembering *no* final state: its
        PREPARE may still have reached the disk, and then it is open again after a
        restart, so answering a later commit/rollback with "rolled back" would be an
        acknowledgement the log does not back (a later one gets UnknownTransaction)."""
        self.open.pop(key, None)

    def oldest_prepare_offset(self) -> int | None:
        with self.lock:
            return min((t.prepare_offset for t in self.open.values()), default=None)

    # ------------------------------------------------------------------ feedback

    def poll_uncertain(self, producer_group: str, max_items: int, lease_ms: int,
                       wait_ms: int, owner: object = None) -> list[OpenTransaction]:
        """Open transactions of ``producer_group`` due for a check and not leased to
        someone else, leased to ``owner`` for ``lease_ms``; waits up to ``wait_ms`` for one
        to become due (long poll). The caller caps ``lease_ms``."""
        deadline = time.monotonic() + wait_ms / 1000.0
        with self._uncertain:
            while True:
                now = time.monotonic()
                due = [t for t in self.open.values()
                       if t.producer_group == producer_group and t.state == TxState.OPEN
                       and t.prepared and t.next_check_at <= now and t.lease_until <= now]
                # A leftover of a closed scope is not asked about: the broker ends it
                # (fmq.tx.closed_scopes), and until then it is no poller's business; nor
                # is a decision mark, which the broker ends once its scope is finished.
                leftovers = {t.key for t in due
                             if self.closed_scope_of(producer_group, t.tx_id)
                             or (len(t.messages) == 1 and t.messages[0].key == DECISION_KEY)}
                if leftovers:
                    due = [t for t in due if t.key not in leftovers]
                if due:
                    due.sort(key=lambda t: t.prepare_offset)
                    picked = due[:max_items]
                    for t in picked:
                        t.checks += 1
                        self.checks_sent += 1
                        t.lease_until = now + lease_ms / 1000.0
                        t.lease_owner = owner
                        backoff = min(self.check_max_interval,
                                      max(self.check_after, 0.1) * (2 ** min(t.checks, 16)))
                        t.next_check_at = now + backoff
                    return picked
                if now >= deadline:
                    return []
                pending = [max(t.next_check_at, t.lease_until) for t in self.open.values()
                           if t.producer_group == producer_group and t.state == TxState.OPEN
                           and t.key not in leftovers]
                wake = min([deadline, *pending])
                self._waiting += 1
                self._latest_wake = max(self._latest_wake, wake)
                try:
                    self._uncertain.wait(max(0.001, wake - now))
                finally:
                    self._waiting -= 1
                    if not self._waiting:
                        self._latest_wake = 0.0

    def release_lease(self, producer_group: str, tx_id: str, owner: object = None) -> bool:
        """Return ``owner``'s lease of ``tx_id`` (an UNKNOWN answer): it is offered again
        after its back-off. Someone else's lease stays; returns whether one was released."""
        with self._uncertain:
            tx = self.open.get((producer_group, tx_id))
            if tx is None or tx.lease_owner != owner or tx.lease_until <= time.monotonic():
                return False
            tx.lease_until = 0.0
            tx.lease_owner = None
            self._uncertain.notify_all()
            return True

    def release_leases(self, owner: object) -> int:
        """Return every lease ``owner`` holds (its connection closed): nobody will answer
        for them, so they are offered again at once, back-off or not."""
        with self._uncertain:
            now = time.monotonic()
            released = 0
            for tx in self.open.values():
                if tx.lease_owner != owner:
                    continue
                tx.lease_owner = None  # expired or not: drop the reference to the owner
                if tx.lease_until > now:
                    tx.lease_until = 0.0
                    tx.next_check_at = min(tx.next_check_at, now)
                    released += 1
            if released:
                self._uncertain.notify_all()
            return released

    def prepared(self, tx: OpenTransaction) -> None:
        """``tx`` is now prepared (lock held by the caller). The waiting pollers are woken
        only when it falls due before one of them would wake anyway: with the default
        ``tx_check_after_ms`` it never does, and waking every feedback poller on every
        prepare (each then scanning the open transactions) put the check-back path on the
        commit path."""
        tx.prepared = True
        if self._waiting and tx.next_check_at < self._latest_wake:
            self.poller_wakeups += 1
            self._uncertain.notify_all()

    def list_open(self, now_ms: int) -> list[dict]:
        with self.lock:
            txs = sorted(self.open.values(), key=lambda t: t.prepare_offset)
            return [t.info(now_ms) for t in txs]


def _unknown(tx_id: str) -> UnknownTransaction:
    return UnknownTransaction(
        f"no open or recently finished transaction {tx_id!r} in this producer group; it "
        f"may be older than the finished-id memory (tx_finished_memory), or was never "
        f"prepared here")
