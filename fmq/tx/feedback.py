"""Feedback (the producer check-back): offer open transactions to their producer group
under a lease, take its answer, return the leases of a closed connection. The broker never
decides; the producer answers with commit/rollback (or nothing, for "unknown")."""

from __future__ import annotations

from collections.abc import Callable

from fmq.config import BrokerConfig
from fmq.errors import InvalidArgument
from fmq.log.record import Record
from fmq.message import check_count, check_label, check_name, check_offset
from fmq.tx.decided_scopes import DecidedScopes
from fmq.tx.manager import TxManager
from fmq.tx.state import PreparedMessage, TxState, UncertainTx


class Feedback:
    """The check-back of one broker's open transactions. ``commit`` and ``rollback`` end a
    transaction by (producer group, id) the way the broker's writer does (they check it
    is open)."""

    def __init__(self, txm: TxManager, config: BrokerConfig,
                 read_record: Callable[[int, int], Record],
                 commit: Callable[[str, str], TxState],
                 rollback: Callable[[str, str], TxState],
                 decided: DecidedScopes | None = None) -> None:
        self.tx = txm
        self.decided = decided
        self.config = config
        self.read_record = read_record
        self.commit = commit
        self.rollback = rollback

    def poll_uncertain(self, producer_group: str, max_items: int = 16, lease_ms: int = 5000,
                       wait_ms: int = 0, owner: object = None) -> list[UncertainTx]:
        """Open transactions of ``producer_group`` older than ``tx_check_after_ms`` and not
        leased to another poller, with their messages. Long-polls up to ``wait_ms``. Each
        is leased to ``owner`` (an opaque token, e.g. the server's connection; None for
        embedded callers) for ``lease_ms``, lowered to ``max_feedback_lease_ms``."""
        check_name(producer_group, "producer_group", allow_none=False)
        check_count(max_items, "max_items")
        for name, v in (("lease_ms", lease_ms), ("wait_ms", wait_ms)):
            check_offset(v, name)
        lease_ms = min(lease_ms, self.config.max_feedback_lease_ms)
        picked = self.tx.poll_uncertain(producer_group, max_items, lease_ms, wait_ms, owner)
        out = []
        for t in picked:
            msgs = []
            for m in t.messages:
                try:
                    pre = self.read_record(m.offset, m.size)
                    body = pre.body
                    props = pre.properties or {}
                except Exception:  # noqa: BLE001 - a body we cannot read is still offered
                    body, props = b"", {}
                msgs.append(PreparedMessage(m.topic, bytes(body), m.key, m.tags, props,
                                            m.queue_id, m.offset))
            out.append(UncertainTx(t.tx_id, t.producer_group, t.prepare_offset, t.store_time,
                                   t.checks, msgs))
        return out

    def answer_uncertain(self, producer_group: str | None, tx_id: str, state: TxState,
                         owner: object = None) -> TxState:
        """A producer's answer to an offer of ``producer_group``'s transaction ``tx_id``:
        commit, rollback or unknown. Commit and rollback are accepted from anyone allowed
        the group (they are idempotent and the producer group decides); unknown returns the
        lease only when ``owner`` holds it. No group: the one that used the id (a trusted
        caller's shortcut, :meth:`fmq.tx.manager.TxManager.group_of`)."""
        check_label(tx_id, "tx_id", allow_none=False)
        try:
            state = TxState(state)
        except ValueError:
            raise InvalidArgument(f"a feedback answer is commit, rollback or unknown, not "
                                  f"{state!r}") from None
        if producer_group is None:
            producer_group = self.tx.group_of(tx_id)
        check_label(producer_group, "producer_group", allow_none=False)
        if state == TxState.COMMIT:
            return self.commit(producer_group, tx_id)
        if state == TxState.ROLLBACK:
            if self.decided is not None:  # a decided winner is never rolled back
                self.decided.check_rollback(producer_group, tx_id)
            return self.rollback(producer_group, tx_id)
        if state == TxState.UNKNOWN:
            self.tx.release_lease(producer_group, tx_id, owner)
            return TxState.UNKNOWN
        raise InvalidArgument(f"a feedback answer is commit, rollback or unknown, not {state.value}")

    def release_leases(self, owner: object) -> int:
        """Return every lease ``owner`` holds (its connection closed): those transactions
        are offered to the next poll at once. Returns how many."""
        return self.tx.release_leases(owner)
