"""Producers: plain sends and transactions with feedback."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from fmq.errors import (
    BrokerClosed,
    ConnectionLost,
    DuplicateTransaction,
    FMQError,
    InvalidArgument,
    NotEnoughReplicas,
    RequestTimeout,
    TransactionRolledBack,
)
from fmq.message import Message, ScheduledSend, SendResult
from fmq.protocol import Op
from fmq.protocol.values import (
    message_to_wire,
    result_from_wire,
    schedule_to_wire,
    scheduled_from_wire,
    uncertain_from_wire,
)
from fmq.tx.ids import new_tx_id
from fmq.tx.state import TxState, UncertainTx

from .base import Client
from .deadline import DEFAULT_DELIVERY_TIMEOUT
from .discovery import PRIMARY
from .idempotence import Sequencer
from .sender import BatchSender

logger = logging.getLogger("fmq.client")


class Producer(Client):
    """Sends messages to an FMQ server. Thread-safe: share one producer between threads;
    their requests are pipelined on one connection and share the server's group commit.

    ``servers``: ``"host:port"`` (comma-separated or a list for several: the nodes of a
    broker group, among which the producer finds the primary and, after a fail-over, the
    new one; docs/client.md).

    :meth:`send_async` batches on the client (like Kafka's ``linger.ms``/``batch.size``):
    messages wait up to ``linger_ms`` for others, and a batch is sent as one SEND_BATCH
    when it holds ``batch_size`` encoded bytes or ``max_batch_messages`` messages (keep
    that at or below the server's limit of the same name). At most ``max_in_flight``
    requests (and the server's own limit) are in flight at once. Messages not yet answered
    hold at most ``buffer_memory`` bytes; beyond that ``send_async`` blocks up to
    ``max_block_s`` and then raises :class:`~fmq.client.batching.BufferFull`.

    ``idempotent`` (the default): every message carries this producer's id
    (``producer_id``, random unless given) and a sequence number, so the server answers a
    resend with the original's result: a send that timed out or lost its connection is
    sent again safely, by ``send`` and ``send_batch`` as by ``send_async``.
    ``dedup_window_messages`` (keep it at or below the server's setting of that name, 10,000
    by default): ``send_async`` keeps the sequence numbers of its unanswered messages
    fewer than that apart, so that a batch sent again after later ones were stored is
    still one the server's window can judge. A message whose
    properties already hold ``%producer`` is sent as it is (the application numbers it).

    ``delivery_timeout`` (seconds, default 120, Kafka's ``delivery.timeout.ms``): how long
    a send (from ``send``, or from ``send_async`` handing the message over) keeps being
    retried through retriable errors (a fail-over: lost connections, NotPrimary,
    NotEnoughReplicas while the new primary's followers join, PrimaryNotFound during the
    election), with back-off and a new search for the primary each time; then it fails
    with :class:`~fmq.errors.DeliveryTimeout` naming the last error. ``retries=N`` (no
    count by default) also stops after N retries, as before."""

    def __init__(self, servers: str | Sequence[str], producer_group: str | None = None, *,
                 linger_ms: float = 5, batch_size: int = 64 * 1024,
                 max_batch_messages: int = 10_000, buffer_memory: int = 32 * 1024 * 1024,
                 max_block_s: float = 60.0, idempotent: bool = True,
                 producer_id: str | None = None, dedup_window_messages: int = 10_000,
                 **options: Any) -> None:
        options.setdefault("node", PRIMARY)
        options.setdefault("retries", None)
        options.setdefault("delivery_timeout", DEFAULT_DELIVERY_TIMEOUT)
        super().__init__(servers, **options)
        self._sequencer = Sequencer(idempotent, producer_id)
        self.idempotent = idempotent
        self.producer_id = self._sequencer.producer_id
        if (batch_size < 1 or max_batch_messages < 1 or buffer_memory < 1 or linger_ms < 0
                or dedup_window_messages < 1):
            raise InvalidArgument("batch_size, max_batch_messages, buffer_memory and "
                                  "dedup_window_messages must be positive and linger_ms at "
                                  "least 0")
        self.producer_group = producer_group
        self._batching = {"linger_s": linger_ms / 1000, "batch_size": batch_size,
                          "max_batch_messages": max_batch_messages,
                          "buffer_memory": buffer_memory, "max_block_s": max_block_s,
                          "dedup_window_messages": dedup_window_messages}
        self._sender: BatchSender | None = None
        self._sender_lock = threading.Lock()
        self._sender_closed = False

    def send(self, topic: str, body: bytes, key: str | None = None, tags: str | None = None,
             properties: dict[str, str] | None = None, queue_id: int | None = None, *,
             deliver_at: int | datetime | None = None,
             delay: float | timedelta | None = None) -> SendResult | ScheduledSend:
        """Store one message; returns once it is durable on the server. With
        ``deliver_at`` (ms since the epoch, or an aware datetime) or ``delay`` (seconds, or
        a timedelta, counted on the server's clock) it becomes consumable only then, and
        the answer is a :class:`~fmq.message.ScheduledSend`."""
        return self.send_message(Message(topic, body, key, tags, properties, queue_id),
                                 deliver_at=deliver_at, delay=delay)

    def send_message(self, message: Message, *, deliver_at: int | datetime | None = None,
                     delay: float | timedelta | None = None) -> SendResult | ScheduledSend:
        """:meth:`send` of a :class:`~fmq.message.Message`. A scheduled message takes no
        sequence number: a SEND_AT retried after a lost answer may store it twice."""
        if deliver_at is None and delay is None:
            msg = message_to_wire(self._sequencer.stamp(message))
            return result_from_wire(self.call(Op.SEND, {"message": msg})["result"])
        fields = {"message": message_to_wire(message), **schedule_to_wire(deliver_at, delay)}
        return scheduled_from_wire(self.call(Op.SEND_AT, fields))

    def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Store several messages in one request and one group commit: all or none."""
        wire = [message_to_wire(self._sequencer.stamp(m)) for m in messages]
        if not wire:
            return []
        answer = self.call(Op.SEND_BATCH, {"messages": wire})
        return [result_from_wire(r) for r in answer["results"]]

    def send_async(self, topic: str, body: bytes, key: str | None = None,
                   tags: str | None = None, queue_id: int | None = None,
                   properties: dict[str, str] | None = None) -> Future[SendResult]:
        """Queue one message for a batch; the future resolves to its SendResult once the
        batch is durable on the server, or raises the batch's FMQError. A value the wire
        cannot carry raises here, at once."""
        args = (topic, body, key, tags, properties, queue_id)
        part, sequence = self._sequencer.encode(*args)
        fut: Future[SendResult] = Future()  # cancelling it does not take the message back
        sender = self._sender or self._start_sender()
        sender.add(part, fut, sequence,
                   None if sequence is None else partial(self._sequencer.encode, *args))
        return fut

    def _start_sender(self) -> BatchSender:
        with self._sender_lock:
            if self._closed or self._sender_closed:
                raise BrokerClosed("this producer is closed; create a new one")
            if self._sender is None:
                self._sender = BatchSender(self, idempotent=self.idempotent,
                                           **self._batching)
            return self._sender

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every message given to :meth:`send_async` before this call has its
        outcome (result or error). Raises RequestTimeout when ``timeout`` seconds pass
        first."""
        if self._sender is not None:
            self._sender.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` seconds), then close; a message still unsent then
        fails with BrokerClosed."""
        with self._sender_lock:
            sender = self._sender
            self._sender_closed = True
        try:
            if sender is not None:
                sender.close(timeout)
        finally:
            super().close()

    def __enter__(self) -> Producer:
        return self


@dataclass(frozen=True)
class TransactionResult:
    """What became of :meth:`TransactionProducer.send_in_transaction`.

    ``state``: COMMIT, ROLLBACK, or OPEN (left to feedback: the local transaction answered
    UNKNOWN or raised, or the commit/rollback could not reach the server). ``local_state``:
    what the local transaction returned. ``error``: its exception, or the failure to end
    the transaction, when there was one."""

    tx_id: str
    state: TxState
    local_state: TxState
    error: BaseException | None = None


Checker = Callable[[UncertainTx], TxState]
LocalTransaction = Callable[[str, Any], TxState]


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
        self._stop = threading.Event()
        self._feedback: threading.Thread | None = None
        if feedback:
            self._feedback = threading.Thread(target=self._feedback_loop, daemon=True,
                                              name=f"fmq-feedback-{producer_group}")
            self._feedback.start()

    # ------------------------------------------------------------------ transactions

    def prepare(self, messages: Sequence[Message], tx_id: str | None = None) -> str:
        """Store ``messages`` as a prepared (invisible) transaction; returns its id."""
        wire = [message_to_wire(m) for m in messages]
        generated = not tx_id
        # Ids are version-ip-start time-pid-connection seq-tx seq (docs/transactions.md).
        tx_id = tx_id or new_tx_id(self.connection_seq)
        req = {"producer_group": self.producer_group, "tx_id": tx_id, "messages": wire}
        # The answer to an attempt was lost (connection, time-out): it may be stored, whole
        # or (after a server crash) cut short, which recovery rolls back.
        maybe_applied = False
        attempts = self.attempts()
        while True:
            try:
                return self.call(Op.PREPARE, req, retries=0,
                                 timeout=attempts.cap(self.request_timeout))["tx_id"]
            except DuplicateTransaction:
                if maybe_applied:
                    # The server only reports an id as prepared once every message of it
                    # is durable: our earlier attempt is stored whole.
                    return tx_id
                raise
            except TransactionRolledBack:
                if not (maybe_applied and generated):
                    raise
                # Our earlier attempt was cut short by a crash and rolled back: nothing of
                # it is stored. Prepare again under a fresh id (never commit the old one).
                logger.warning("prepare of %s was cut short by a server crash and rolled "
                               "back; preparing again under a new id", tx_id)
                tx_id = new_tx_id(self.connection_seq)
                req["tx_id"] = tx_id
                maybe_applied = False
            except FMQError as exc:
                delay = attempts.pause(exc, self._closed)
                # NotEnoughReplicas: stored on the primary, only the followers' copy failed.
                maybe_applied = maybe_applied or isinstance(
                    exc, (ConnectionLost, RequestTimeout, NotEnoughReplicas))
                time.sleep(delay)

    def commit(self, tx_id: str) -> TxState:
        """Commit this producer group's transaction ``tx_id``."""
        return TxState(self.call(Op.COMMIT, {"producer_group": self.producer_group,
                                             "tx_id": tx_id})["state"])

    def rollback(self, tx_id: str) -> TxState:
        """Roll back this producer group's transaction ``tx_id``."""
        return TxState(self.call(Op.ROLLBACK, {"producer_group": self.producer_group,
                                               "tx_id": tx_id})["state"])

    def send_in_transaction(self, messages: Message | Sequence[Message],
                            local_transaction: LocalTransaction, arg: Any = None,
                            tx_id: str | None = None) -> TransactionResult:
        """Prepare ``messages``, run ``local_transaction(tx_id, arg)``, then commit (it
        returned COMMIT), roll back (ROLLBACK) or leave the transaction to feedback
        (UNKNOWN, or it raised). Raises only when the prepare fails (then nothing is
        stored and the local transaction is not run)."""
        if isinstance(messages, Message):
            messages = [messages]
        tx_id = self.prepare(messages, tx_id)
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
    def transaction(self, tx_id: str | None = None) -> Iterator[Transaction]:
        """``with producer.transaction() as tx: tx.send(...)``: prepare and commit on a
        normal exit (``tx.result`` then holds the outcome); nothing is stored when the
        block raises."""
        tx = Transaction(self, tx_id)
        yield tx
        if not tx.messages:
            return
        tid = self.prepare(tx.messages, tx.tx_id)
        tx.tx_id = tid
        tx.result = TransactionResult(tid, self.commit(tid), TxState.COMMIT)

    # ------------------------------------------------------------------ feedback

    def _feedback_loop(self) -> None:
        """Long-poll the server for uncertain transactions of our group about every
        ``feedback_interval`` and answer each with the checker's verdict."""
        failures = 0
        wait_ms = int(self.feedback_interval * 1000)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                resp = self.call(Op.POLL_UNCERTAIN, {
                    "producer_group": self.producer_group, "max_items": 16,
                    "lease_ms": int(self.feedback_timeout * 1000), "wait_ms": wait_ms},
                    timeout=self.feedback_timeout + wait_ms / 1000, retries=0)
                failures = 0
                for t in resp["transactions"]:
                    if self._stop.is_set():
                        break
                    self._answer(uncertain_from_wire(t))
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

    def _answer(self, uncertain: UncertainTx) -> None:
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
                                                    "state": state.value})["state"]
            self.checks_answered += 1
            logger.info("feedback: %s answered %s -> %s", uncertain.tx_id, state.value, final)
        except FMQError as exc:
            logger.warning("feedback answer for %s failed: %s", uncertain.tx_id, exc)

    def close(self) -> None:
        self._stop.set()
        super().close()  # fails a feedback poll in flight at once, so the join is quick
        if self._feedback is not None and self._feedback is not threading.current_thread():
            self._feedback.join(self.feedback_timeout + 1)

    def __enter__(self) -> TransactionProducer:
        return self
