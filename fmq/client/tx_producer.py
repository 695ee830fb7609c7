"""Transactions of a producer: prepare, commit or roll back, and the feedback (check-back)
thread that answers for transactions left open. In a cluster a transaction stays in one
broker group (docs/client.md, "Routing"): its PREPARE, COMMIT, ROLLBACK and check-backs go
to that group's primary."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from fmq.errors import (
    DuplicateTransaction,
    FMQError,
    InvalidArgument,
    TransactionRolledBack,
)
from fmq.message import Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire, uncertain_from_wire
from fmq.tx.ids import new_tx_id
from fmq.tx.state import TxState, UncertainTx

from .acquire import OWN_LINK
from .cluster.router import PlacedRequest
from .deadline import may_be_stored
from .pending_commit import PendingCommit
from .producer import Producer, TransactionResult

logger = logging.getLogger("fmq.client")

Checker = Callable[[UncertainTx], TxState]
LocalTransaction = Callable[[str, Any], TxState]

#: How long :meth:`TransactionProducer.commit_with_next` holds a COMMIT for a next request
#: to write it with, by default (milliseconds).
COMMIT_LINGER_MS = 5.0


class Transaction:
    """Collects the messages of ``with producer.transaction() as tx:``. Nothing reaches the
    server before the block ends: then the messages are prepared and committed. When the
    block raises, nothing was stored, which is a rollback."""

    def __init__(self, producer: TransactionProducer, tx_id: str | None) -> None:
        self.producer = producer
        self.tx_id = tx_id
        self.messages: list[Message] = []
        self.result: TransactionResult | None = None

    def send(self, topic: str, body: bytes, key: str | None = None, tags: str | None = None,
             properties: dict[str, str] | None = None, queue_id: int | None = None) -> None:
        msg = Message(topic, body, key, tags, properties, queue_id)
        message_to_wire(msg)  # fail inside the block, where the caller can react
        self.messages.append(msg)


class TransactionProducer(Producer):
    """A producer of transactional messages with a feedback (check-back) thread.

    ``checker(uncertain) -> TxState`` is called from the feedback thread for every open
    transaction of ``producer_group`` the server offers (one older than the server's
    ``tx_check_after_ms``, e.g. because the producer that prepared it died); it answers
    COMMIT, ROLLBACK or UNKNOWN (ask again later). An exception counts as UNKNOWN.
    """

    def __init__(self, servers: str | Sequence[str], producer_group: str,
                 checker: Checker, *, feedback_interval: float = 0.1,
                 feedback_timeout: float = 5.0, feedback: bool = True,
                 **options: Any) -> None:
        if not producer_group:
            raise InvalidArgument("a TransactionProducer needs a producer_group")
        super().__init__(servers, producer_group, **options)
        self.checker = checker
        self.feedback_interval = feedback_interval
        self.feedback_timeout = feedback_timeout
        self.checks_answered = 0
        #: The link (broker group) of each transaction this producer prepared and has not
        #: ended yet.
        self._tx_links: dict[str, str] = {}
        #: Commits of commit_with_next without an outcome yet (close waits for them).
        self._pending_commits: set[PendingCommit] = set()
        self._commits_lock = threading.Lock()
        self._stop = threading.Event()
        self._feedback: threading.Thread | None = None
        if feedback:
            self._feedback = threading.Thread(target=self._feedback_loop, daemon=True,
                                              name=f"fmq-feedback-{producer_group}")
            self._feedback.start()

    # ------------------------------------------------------------------ transactions

    def prepare(self, messages: Sequence[Message], tx_id: str | None = None,
                group: str | None = None) -> str:
        """Store ``messages`` as a prepared (invisible) transaction; returns its id. In a
        cluster every message goes to one broker group: ``group``, else the group the
        first message would go to alone; a message whose topic has no writable queue
        there raises :class:`~fmq.client.SpansGroups` before anything is sent."""
        for m in messages:
            message_to_wire(m)  # a value the wire cannot carry fails before any request
        generated = not tx_id
        # Ids are version-ip-start time-pid-connection seq-tx seq (docs/transactions.md).
        req = {"producer_group": self.producer_group,
               "tx_id": tx_id or new_tx_id(self.connection_seq)}
        # The answer to an attempt was lost (connection, time-out), or the server stored it
        # without acknowledging it (NotEnoughReplicas, LeadershipLost): it may be stored,
        # whole or (after a server crash) cut short, which recovery rolls back.
        maybe_applied = False
        where = OWN_LINK

        def note(exc: FMQError, placed: PlacedRequest) -> None:
            nonlocal maybe_applied, where
            where = placed.link
            maybe_applied = maybe_applied or may_be_stored(exc)

        attempts = self.attempts()
        while True:
            try:
                answer, placed = self.deliver(
                    Op.PREPARE, messages, lambda wire: {**req, "messages": wire}, stamp=False,
                    broker_group=group, confined=True, attempts=attempts, on_error=note)
                self._tx_links[answer["tx_id"]] = placed.link
                return answer["tx_id"]
            except DuplicateTransaction:
                if maybe_applied:
                    # The server only reports an id as prepared once every message of it
                    # is durable: our earlier attempt is stored whole.
                    self._tx_links[req["tx_id"]] = where
                    return req["tx_id"]
                raise
            except TransactionRolledBack:
                if not (maybe_applied and generated):
                    raise
                # Our earlier attempt was cut short by a crash and rolled back: nothing of
                # it is stored. Prepare again under a fresh id (never commit the old one).
                logger.warning("prepare of %s was cut short by a server crash and rolled "
                               "back; preparing again under a new id", req["tx_id"])
                req["tx_id"] = new_tx_id(self.connection_seq)
                maybe_applied = False

    def _end(self, op: Op, tx_id: str) -> TxState:
        """COMMIT or ROLLBACK of ``tx_id``, on the link of the group that prepared it."""
        link = self._tx_links.get(tx_id, OWN_LINK)
        state = TxState(self.call(op, {"producer_group": self.producer_group, "tx_id": tx_id},
                                  link=link)["state"])
        self._tx_links.pop(tx_id, None)
        return state

    def commit(self, tx_id: str) -> TxState:
        """Commit this producer group's transaction ``tx_id``."""
        return self._end(Op.COMMIT, tx_id)

    def commit_with_next(self, tx_id: str, *,
                         linger_ms: float = COMMIT_LINGER_MS) -> PendingCommit:
        """Commit this producer group's transaction ``tx_id`` without waiting: the COMMIT
        is held and written in one write with the next request on its connection (the
        next :meth:`prepare`), so the two share a server turn, a group commit and a round
        trip; or alone once ``linger_ms`` passed with no request following, when its
        :meth:`PendingCommit.result` is asked, or on :meth:`close`. Returns the handle
        whose ``result()`` is what :meth:`commit` would have returned or raised, once the
        server answered (retriable failures retried within ``delivery_timeout``).

        The transaction is committed only when that outcome says so: a check-back for it
        meanwhile goes to the checker as for any open transaction (docs/transactions.md,
        *A commit written with the next prepare*)."""
        if not linger_ms >= 0:
            raise InvalidArgument(f"linger_ms must be 0 or more milliseconds, not "
                                  f"{linger_ms!r}")
        pending = PendingCommit(self, tx_id, self._tx_links.get(tx_id, OWN_LINK),
                                self.attempts())
        with self._commits_lock:
            self._pending_commits.add(pending)
        pending.add_done_callback(self._commit_ended)
        pending.start(linger_ms / 1000)
        return pending

    def _commit_ended(self, pending: PendingCommit) -> None:
        with self._commits_lock:
            self._pending_commits.discard(pending)

    def rollback(self, tx_id: str) -> TxState:
        """Roll back this producer group's transaction ``tx_id``."""
        return self._end(Op.ROLLBACK, tx_id)

    def send_in_transaction(self, messages: Message | Sequence[Message],
                            local_transaction: LocalTransaction, arg: Any = None,
                            tx_id: str | None = None, group: str | None = None
                            ) -> TransactionResult:
        """Prepare ``messages``, run ``local_transaction(tx_id, arg)``, then commit (it
        returned COMMIT), roll back (ROLLBACK) or leave the transaction to feedback
        (UNKNOWN, or it raised). Raises only when the prepare fails (then nothing is
        stored and the local transaction is not run)."""
        if isinstance(messages, Message):
            messages = [messages]
        tx_id = self.prepare(messages, tx_id, group)
        error: BaseException | None = None
        try:
            local = local_transaction(tx_id, arg)
            local = TxState(local) if local is not None else TxState.UNKNOWN
            if local not in (TxState.COMMIT, TxState.ROLLBACK, TxState.UNKNOWN):
                raise InvalidArgument(f"a local transaction returns COMMIT, ROLLBACK or "
                                      f"UNKNOWN, not {local.value}")
        except Exception as exc:  # noqa: BLE001 - by contract: an exception means UNKNOWN
            logger.warning("local transaction of %s raised %r: left open for feedback",
                           tx_id, exc)
            local, error = TxState.UNKNOWN, exc
        if local == TxState.UNKNOWN:
            return TransactionResult(tx_id, TxState.OPEN, local, error)
        try:
            state = self.commit(tx_id) if local == TxState.COMMIT else self.rollback(tx_id)
        except FMQError as exc:
            # The decision is made; feedback will ask the checker again and apply it.
            logger.warning("could not %s %s (%s): left to feedback", local.value, tx_id, exc)
            return TransactionResult(tx_id, TxState.OPEN, local, exc)
        return TransactionResult(tx_id, state, local)

    @contextmanager
    def transaction(self, tx_id: str | None = None,
                    group: str | None = None) -> Iterator[Transaction]:
        """``with producer.transaction() as tx: tx.send(...)``: prepare and commit on a
        normal exit (``tx.result`` then holds the outcome); nothing is stored when the
        block raises."""
        tx = Transaction(self, tx_id)
        yield tx
        if not tx.messages:
            return
        tid = self.prepare(tx.messages, tx.tx_id, group)
        tx.tx_id = tid
        tx.result = TransactionResult(tid, self.commit(tid), TxState.COMMIT)

    # ------------------------------------------------------------------ feedback

    def _feedback_loop(self) -> None:
        """Long-poll the server for uncertain transactions of our group about every
        ``feedback_interval`` and answer each with the checker's verdict; in a cluster, the
        primary of every broker group this producer sends to, one after the other."""
        failures = 0
        wait_ms = int(self.feedback_interval * 1000)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                failed: FMQError | None = None
                for link in self.links.names():
                    try:  # one group's outage does not hold up the others' check-backs
                        self._poll(link, wait_ms)
                    except FMQError as exc:
                        failed = exc
                if failed is not None:
                    raise failed
                failures = 0
            except FMQError as exc:
                if self._stop.is_set():
                    break
                failures += 1
                if failures == 1 or failures % 50 == 0:
                    logger.warning("feedback poll for group %s failed: %s", self.producer_group,
                                   exc)
                self._stop.wait(self._backoff(min(failures, 6)))
                continue
            rest = self.feedback_interval - (time.monotonic() - started)
            if rest > 0:
                self._stop.wait(rest)

    def _poll(self, link: str, wait_ms: int) -> None:
        resp = self.call(Op.POLL_UNCERTAIN, {
            "producer_group": self.producer_group, "max_items": 16,
            "lease_ms": int(self.feedback_timeout * 1000), "wait_ms": wait_ms},
            timeout=self.feedback_timeout + wait_ms / 1000, retries=0, link=link)
        for t in resp["transactions"]:
            if self._stop.is_set():
                break
            self._answer(uncertain_from_wire(t), link)

    def _answer(self, uncertain: UncertainTx, link: str = OWN_LINK) -> None:
        try:
            state = TxState(self.checker(uncertain))
        except Exception as exc:  # noqa: BLE001 - by contract: an exception means UNKNOWN
            logger.warning("checker raised %r for %s: answering unknown", exc, uncertain.tx_id)
            state = TxState.UNKNOWN
        if state not in (TxState.COMMIT, TxState.ROLLBACK, TxState.UNKNOWN):
            state = TxState.UNKNOWN
        try:
            final = self.call(Op.ANSWER_UNCERTAIN, {"producer_group": uncertain.producer_group,
                                                    "tx_id": uncertain.tx_id,
                                                    "state": state.value}, link=link)["state"]
            self.checks_answered += 1
            logger.info("feedback: %s answered %s -> %s", uncertain.tx_id, state.value, final)
        except FMQError as exc:
            logger.warning("feedback answer for %s failed: %s", uncertain.tx_id, exc)

    def close(self, timeout: float | None = None) -> None:
        """Write the commits :meth:`commit_with_next` still holds and wait (up to
        ``timeout`` seconds, None: each until its outcome) for their answers; then close
        as :meth:`Producer.close` does. A commit without an outcome by then fails with
        the error its connection's closing gives (its transaction stays open for the
        check-back unless the server applied it)."""
        with self._commits_lock:
            pending = list(self._pending_commits)
        for commit in pending:
            commit.write_now()
        until = None if timeout is None else time.monotonic() + timeout
        for commit in pending:
            try:
                commit.result(None if until is None else max(0.0, until - time.monotonic()))
            except FMQError:
                pass  # the outcome stays with the handle, for its owner
        self._stop.set()
        super().close(timeout)  # fails a feedback poll in flight at once: a quick join
        if self._feedback is not None and self._feedback is not threading.current_thread():
            self._feedback.join(self.feedback_timeout + 1)

    def __enter__(self) -> TransactionProducer:
        return self
