"""Producers: plain sends and transactions with feedback."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from fmq.errors import (
    BrokerClosed,
    FMQError,
    InvalidArgument,
    NotHosted,
    RequestTimeout,
)
from fmq.message import Message, ScheduledSend, SendResult
from fmq.protocol import Op
from fmq.protocol.values import (
    message_to_wire,
    schedule_to_wire,
    scheduled_from_wire,
)
from fmq.tx.state import TxState

from .acquire import OWN_LINK, broker_group_of, link_of
from .base import Client
from .cluster.placement import choose_queue
from .cluster.route_table import DEFAULT_ROUTE_REFRESH_S, Route
from .cluster.router import Router
from .cluster.sends import RoutedSends
from .deadline import DEFAULT_DELIVERY_TIMEOUT
from .discovery import PRIMARY
from .sender import BatchSender

logger = logging.getLogger("fmq.client")


class Producer(RoutedSends, Client):
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
    count by default) also stops after N retries, as before.

    In a cluster the producer routes each send to the broker group that hosts its queue,
    reading each topic's route with ROUTE at most every ``route_refresh_s`` seconds (and at
    once after NotHosted); docs/client.md, "Routing over broker groups"."""

    def __init__(self, servers: str | Sequence[str], producer_group: str | None = None, *,
                 linger_ms: float = 5, batch_size: int = 64 * 1024,
                 max_batch_messages: int = 10_000, buffer_memory: int = 32 * 1024 * 1024,
                 max_block_s: float = 60.0, idempotent: bool = True,
                 producer_id: str | None = None, dedup_window_messages: int = 10_000,
                 route_refresh_s: float = DEFAULT_ROUTE_REFRESH_S, **options: Any) -> None:
        options.setdefault("node", PRIMARY)
        options.setdefault("retries", None)
        options.setdefault("delivery_timeout", DEFAULT_DELIVERY_TIMEOUT)
        super().__init__(servers, **options)
        self.router = Router(self.links, idempotent, producer_id, route_refresh_s)
        self._sequencer = self.router.sequencer_single
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
        #: In a cluster, the batches of each broker group, and the arguments of each
        #: message not answered yet (placed anew when a group refuses it: NotHosted).
        self._senders: dict[str, BatchSender] = {}
        self._routed: dict[Future, tuple] = {}
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
            answer, placed = self.deliver(Op.SEND, [message], lambda w: {"message": w[0]})
            return self.router.results([answer["result"]], placed)[0]
        schedule = schedule_to_wire(deliver_at, delay)
        answer, _ = self.deliver(Op.SEND_AT, [message], lambda w: {"message": w[0], **schedule},
                                 stamp=False)
        return scheduled_from_wire(answer)

    def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Store several messages in one request and one group commit: all or none. In a
        cluster they go to one broker group (SpansGroups when their keys or queues lie in
        several: docs/client.md, "Routing")."""
        if not messages:
            return []
        for m in messages:
            message_to_wire(m)  # a value the wire cannot carry fails before any ROUTE
        answer, placed = self.deliver(Op.SEND_BATCH, messages, lambda w: {"messages": w})
        return self.router.results(answer["results"], placed)

    def send_async(self, topic: str, body: bytes, key: str | None = None,
                   tags: str | None = None, queue_id: int | None = None,
                   properties: dict[str, str] | None = None) -> Future[SendResult]:
        """Queue one message for a batch; the future resolves to its SendResult once the
        batch is durable on the server, or raises the batch's FMQError. A value the wire
        cannot carry raises here, at once. In a cluster, batches are per broker group."""
        args = (topic, body, key, tags, properties, queue_id)
        part, sequence = self._sequencer.encode(*args)
        fut: Future[SendResult] = Future()  # cancelling it does not take the message back
        route = self._route_now(topic)
        if route is None or route.single:
            sender = self._sender or self._start_sender(
                OWN_LINK, "" if route is None else route.broker_group_name())
            sender.add(part, fut, sequence,
                       None if sequence is None else partial(self._sequencer.encode, *args))
        else:
            self._routed[fut] = args
            try:
                self._add_routed(fut, args)
            except BaseException:
                self._routed.pop(fut, None)
                raise
            fut.add_done_callback(self._forget)
        return fut

    def _route_now(self, topic: str) -> Route | None:
        """The route of a ``send_async``, read once without retrying (the caller does not
        wait out an outage here); None when it cannot be read now: the message takes the
        producer's own group, whose batches retry within the delivery deadline."""
        if self.routes.unreadable_for(topic, self.backoff_max):
            return None
        try:
            route = self.route(topic, retries=0)
        except FMQError:
            self.routes.read_failed(topic)
            return None
        self.routes.read_worked(topic)
        return route

    def _forget(self, fut: Future) -> None:
        self._routed.pop(fut, None)

    def _add_routed(self, fut: Future, args: tuple) -> None:
        """Queue a message of a routed topic with the batches of the group it goes to."""
        topic, body, key, tags, properties, queue_id = args
        route = self.route(topic)
        ref = choose_queue(route, key, queue_id, None, self.routes.turn(topic),
                           self.routes.skipped())
        sequencer = self.sequencer(ref.group)
        placed = (topic, body, key, tags, properties, ref.queue_id)
        part, sequence = sequencer.encode(*placed)
        sender = self._senders.get(ref.group) or self._start_sender(link_of(ref.group),
                                                                    ref.group)
        sender.add(part, fut, sequence,
                   None if sequence is None else partial(sequencer.encode, *placed))

    def _reroute(self, handles: list[Future], refusal: NotHosted) -> None:
        """A group refused a batch with NotHosted: read the route again and queue each of
        its messages with the group that hosts its queue now. On a thread of its own: it
        is called on a connection's reader thread, which must not wait for ROUTE or for
        buffer room."""
        threading.Thread(target=self._place_again, args=(handles, refusal), daemon=True,
                         name="fmq-reroute").start()

    def _place_again(self, handles: list[Future], refusal: NotHosted) -> None:
        self.routes.not_hosted(refusal.topic)
        for fut in handles:
            args = self._routed.get(fut)
            if args is None or fut.done():
                continue
            try:
                self.routes.not_hosted(args[0])
                self._add_routed(fut, args)
            except FMQError as exc:
                fut.set_exception(exc)

    def _unreachable(self, broker_group: str) -> None:
        """A batch sender could not reach ``broker_group``'s primary (its batches may be
        kept there, maybe stored): read the routes through that group again, which moves
        its link to the primary they name now (a fail-over)."""
        self.routes.unreachable(broker_group)
        for topic in self.routes.topics_in(broker_group):
            try:
                self.route(topic, retries=0)
            except FMQError:
                return  # the sender's next try asks again

    def _link_lost(self, link: str) -> None:
        # COMMIT, ROLLBACK and check-backs of a transaction go to the group that prepared
        # it: after its fail-over they must follow the route to the new primary.
        self._unreachable(broker_group_of(link))

    def _start_sender(self, link: str, broker_group: str) -> BatchSender:
        with self._sender_lock:
            if self._closed or self._sender_closed:
                raise BrokerClosed("this producer is closed; create a new one")
            if link == OWN_LINK:
                if self._sender is None:
                    self._sender = BatchSender(self, idempotent=self.idempotent,
                                               broker_group=broker_group, **self._batching)
                return self._sender
            sender = self._senders.get(broker_group)
            if sender is None:
                sender = self._senders[broker_group] = BatchSender(
                    self, idempotent=self.idempotent, link=link, broker_group=broker_group,
                    reroute=self._reroute, unreachable=partial(self._unreachable, broker_group),
                    **self._batching)
            return sender

    def _all_senders(self) -> list[BatchSender]:
        with self._sender_lock:
            return [s for s in (self._sender, *self._senders.values()) if s is not None]

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every message given to :meth:`send_async` before this call has its
        outcome (result or error). Raises RequestTimeout when ``timeout`` seconds pass
        first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        routed = list(self._routed)
        for sender in self._all_senders():
            sender.flush(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if routed:  # a message sent again to another group is in that group's batches
            _done, waiting = wait(routed, None if deadline is None
                                  else max(0.0, deadline - time.monotonic()))
            if waiting:
                raise RequestTimeout(f"{len(waiting)} messages have no outcome after "
                                     f"{timeout}s")

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` seconds), then close; a message still unsent then
        fails with BrokerClosed."""
        with self._sender_lock:
            self._sender_closed = True
        try:
            if self._routed:
                self.flush(timeout)
            for sender in self._all_senders():
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
