"""A COMMIT written with the transactional producer's next request
(:meth:`fmq.client.TransactionProducer.commit_with_next`): its handle, and how it reaches
its outcome.

The COMMIT's frame is held on the transaction's connection
(:meth:`~fmq.client.connection.Connection.hold_encoded`) and goes out in one write with the
next request there (the next PREPARE), so both are read in one server turn, share one group
commit and are answered together. It is written alone when nothing follows within the
linger, when someone waits for its outcome, or when the producer closes. Its outcome is
exactly what :meth:`~fmq.client.TransactionProducer.commit` would give: the final state
once the server answered, or the typed error; a retriable failure (a lost connection, a
time-out, a fail-over) is retried on a thread of its own, within the producer's
``delivery_timeout`` and ``retries`` as ``commit`` retries it (a COMMIT names its
transaction: a retry of one already applied answers COMMIT).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

from fmq.errors import ConnectionLost, FMQError, PrimaryNotFound, RequestTimeout
from fmq.protocol import Op, decode_response, encode_request
from fmq.tx.state import TxState

from .acquire import OWN_LINK
from .connection import Connection, timed_out_error
from .deadline import Attempts


class CommitOwner(Protocol):
    """What a :class:`PendingCommit` uses of the producer that made it (a
    :class:`~fmq.client.TransactionProducer`; named by its parts, as that module imports
    this one)."""

    producer_group: str
    request_timeout: float
    _closed: bool
    _tx_links: dict[str, str]

    def _connection(self, link: str = OWN_LINK) -> Connection: ...

    def _link_lost(self, link: str) -> None: ...

    def call(self, op: Op, fields: dict[str, Any], **options: Any) -> dict[str, Any]: ...


class PendingCommit:
    """The outcome of one :meth:`~fmq.client.TransactionProducer.commit_with_next`.

    :meth:`result` waits for it (writing the COMMIT at once if it is still held) and
    returns the transaction's final state, or raises the commit's error: the same
    :class:`~fmq.errors.FMQError` classes ``commit`` raises (``UnknownTransaction``,
    ``TransactionConflict``, ``DeliveryTimeout`` after the retries, ...). The commit is
    done only when the server answered it; until then :meth:`done` is False."""

    def __init__(self, producer: CommitOwner, tx_id: str, link: str,
                 attempts: Attempts) -> None:
        self.tx_id = tx_id
        self._producer = producer
        self._link = link
        self._attempts = attempts
        self._fields = {"producer_group": producer.producer_group, "tx_id": tx_id}
        self._outcome: Future[TxState] = Future()
        #: The held attempt: its connection, its answer's future, and when it times out.
        self._conn: Connection | None = None
        self._first: Future | None = None
        self._first_timeout = 0.0
        self._first_due = 0.0

    # ------------------------------------------------------------------ the caller's side

    @property
    def _written_or_held(self) -> bool:
        return self._first is not None and not self._first.done()

    def done(self) -> bool:
        """Whether the outcome is known (the server answered, or the commit failed for
        good)."""
        return self._outcome.done()

    def result(self, timeout: float | None = None) -> TxState:
        """The transaction's final state once the server answered the COMMIT (COMMIT; a
        commit of a committed transaction answers it too), or the commit's error raised.
        Writes the COMMIT now if it is still held. ``timeout``: seconds to wait (None: until
        the outcome, which the producer's ``request_timeout``, ``delivery_timeout`` and
        ``retries`` bound); when they pass first, :class:`~fmq.errors.RequestTimeout` is
        raised and the commit goes on (ask again)."""
        self.write_now()
        until = None if timeout is None else time.monotonic() + timeout
        while True:
            now = time.monotonic()
            limit = None if until is None else max(0.0, until - now)
            first = self._first
            if first is not None and not first.done():
                if now >= self._first_due:  # as a blocking request times out: retried
                    self._conn.forget(first, timed_out_error(Op.COMMIT, self._conn.address,
                                                             self._first_timeout))
                    continue
                limit = self._first_due - now if limit is None else min(limit,
                                                                         self._first_due - now)
            try:
                return self._outcome.result(limit)
            except FutureTimeout:
                if until is not None and time.monotonic() >= until:
                    raise RequestTimeout(
                        f"the COMMIT of transaction {self.tx_id!r} has no outcome after "
                        f"{timeout:g}s; it is still in flight: call result() again") from None

    def write_now(self) -> None:
        """Write the COMMIT now if it is still held (it need not wait for a next
        request)."""
        if self._written_or_held:
            self._conn.flush_held()

    def add_done_callback(self, fn: Callable[[PendingCommit], Any]) -> None:
        """Call ``fn(self)`` once the outcome is known (at once if it is): on the thread
        that learnt it, the connection's reader thread as a rule, so ``fn`` must not
        block."""
        self._outcome.add_done_callback(lambda _f: fn(self))

    def __repr__(self) -> str:
        if not self._outcome.done():
            return f"<PendingCommit {self.tx_id!r} in flight>"
        exc = self._outcome.exception()
        what = self._outcome.result().value if exc is None else type(exc).__name__
        return f"<PendingCommit {self.tx_id!r} {what}>"

    # ------------------------------------------------------------------ reaching the outcome

    def start(self, linger_s: float) -> None:
        """Hold the COMMIT on the transaction's connection for its next write."""
        producer = self._producer
        fields = self._fields
        try:
            conn = producer._connection(self._link)
            first = conn.hold_encoded(Op.COMMIT,
                                      lambda rid: encode_request(Op.COMMIT, rid, fields),
                                      decode_response, linger_s)
        except FMQError as exc:  # no connection now: the retries look for one
            self._failed(exc)
            return
        self._first_timeout = self._attempts.cap(producer.request_timeout)
        self._first_due = time.monotonic() + linger_s + self._first_timeout
        self._conn, self._first = conn, first
        first.add_done_callback(self._answered)

    def _answered(self, first: Future) -> None:
        exc = first.exception()
        if exc is not None:
            self._failed(exc)
            return
        try:
            state = TxState(first.result()["state"])
        except (KeyError, ValueError) as bad:  # an answer this client cannot read
            self._outcome.set_exception(bad)
            return
        self._settled(state)

    def _failed(self, exc: BaseException) -> None:
        """The held attempt failed: retried on a thread of its own (never on the reader
        thread, which must go on reading) when the budget allows, else the outcome."""
        try:
            delay = self._attempts.pause(exc, self._producer._closed)
        except BaseException as final:  # noqa: BLE001 - the commit's outcome, for result()
            self._outcome.set_exception(final)
            return
        threading.Thread(target=self._retry, args=(exc, delay), daemon=True,
                         name=f"fmq-commit-retry-{self.tx_id}").start()

    def _retry(self, exc: BaseException, delay: float) -> None:
        producer = self._producer
        try:
            if self._link != OWN_LINK and isinstance(exc, (ConnectionLost, PrimaryNotFound)):
                producer._link_lost(self._link)  # the group's new primary, after a fail-over
            time.sleep(delay)
            answer = producer.call(Op.COMMIT, dict(self._fields), link=self._link,
                                   attempts=self._attempts)
            state = TxState(answer["state"])
        except BaseException as final:  # noqa: BLE001 - the commit's outcome, for result()
            self._outcome.set_exception(final)
            return
        self._settled(state)

    def _settled(self, state: TxState) -> None:
        self._producer._tx_links.pop(self.tx_id, None)
        self._outcome.set_result(state)
