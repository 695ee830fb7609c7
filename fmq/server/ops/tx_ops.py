"""PREPARE and COMMIT on the send pipeline: their records are placed on the event loop at
the end of the turn, with that turn's sends, and the acknowledger thread answers them with
the flush that covers them.

A transaction in a worker thread cost two thread hand-offs per request, a wait of its own
for the group commit and a wake-up from it, which under the interpreter lock cost more than
the records themselves (measured: docs/performance.md, "Transactions and recovery
redo"). Through the pipeline a PREPARE or a COMMIT is placed and answered as a send is, and
shares its flush with the sends and transactions of the same turn. The guarantees are the
writer's
(:mod:`fmq.tx.writer`): nothing is answered before its fdatasync (and, in ``sync``
acknowledgement mode, before the followers hold it), a transaction is prepared only once
its PREPARE and PRE_MESSAGEs are durable, and its REF/TX records and COMMIT go to the log
in one placement.

The pipeline is for ``flush_mode`` sync (a transaction is always fdatasync'd; the
acknowledger of ``async`` mode only waits for the write); otherwise, and for a commit that
meets its transaction busy (a concurrent commit or a relocation), the worker threads run
the blocking calls as before.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fmq.engine.broker import Broker
from fmq.message import Message
from fmq.server.context import ServerContext
from fmq.server.ops.batcher import UNSHARED
from fmq.server.ops.placed import Answered, FinishTogether
from fmq.tx.ids import scope_of
from fmq.tx.manager import OpenTransaction
from fmq.tx.state import TxState


def pipelined(ctx: ServerContext) -> bool:
    """Whether transaction writes go through the send pipeline (see the module doc)."""
    return ctx.batcher is not None and ctx.broker.config.flush_mode == "sync"


def _same(value: Any) -> Any:
    return value


def prepare(ctx: ServerContext, messages: Sequence[Message], producer_group: str,
            tx_id: str | None, answer: Callable[[str], Any] = _same) -> Awaitable[Any]:
    """PREPARE: ``answer(transaction id)`` once PREPARE and PRE_MESSAGEs are durable (a
    future, without a task of its own, on the pipeline)."""
    broker = ctx.broker
    if not pipelined(ctx):
        return _in_thread(ctx, answer, broker.transactions.prepare, messages, producer_group, tx_id)
    transactions = broker.transactions

    def place() -> tuple[OpenTransaction, int]:
        return transactions.place_prepare(messages, producer_group, tx_id)

    def finish(tx: OpenTransaction, failure: BaseException | None) -> Any:
        return answer(transactions.prepare_done(tx, failure))

    return ctx.batcher.submit_write(place, finish)


def commit(ctx: ServerContext, producer_group: str, tx_id: str,
           answer: Callable[[TxState], Any] = _same) -> Awaitable[Any]:
    """COMMIT of ``producer_group``'s transaction ``tx_id``: ``answer(final state)`` once
    the commit is durable; wakes the pulls of the queues the transaction's messages went
    to."""
    if not pipelined(ctx):
        return _in_thread(ctx, answer, _commit_in_thread, ctx, producer_group, tx_id)
    transactions = ctx.broker.transactions

    def place() -> tuple[Any, int | None]:
        placed = transactions.place_commit(producer_group, tx_id)
        if placed is None:  # being ended or relocated: a worker thread waits for that
            return asyncio.ensure_future(_in_thread(ctx, answer, _commit_in_thread, ctx,
                                                    producer_group, tx_id)), None
        if isinstance(placed, TxState):  # it had ended already
            return answer(placed), None
        return placed

    def finish(tx: OpenTransaction, failure: BaseException | None) -> Any:
        transactions.commit_done(tx, failure)  # its pulls wake once the index has the messages
        return answer(TxState.COMMIT)

    return ctx.batcher.submit_write(place, finish)


class TxSteps:
    """The session's short step for PREPARE and COMMIT (a server's one instance,
    :func:`tx_steps`): each is queued on the send pipeline without a task or a closure,
    and the turn's PREPAREs (its COMMITs) are placed together, by one call of the writer
    (:meth:`fmq.tx.writer.TxWriter.place_prepares`, ``place_commits``), each request
    still all or none and failing alone. The requests' futures end with the transaction
    id (PREPARE) or the final state (COMMIT; None: committed now), which the session
    frames as they are; the same answers and errors as :func:`prepare` and
    :func:`commit` (tests/server/test_plain_tx_step.py)."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.batcher = ctx.batcher
        self.transactions = transactions = ctx.broker.transactions
        # A turn's PREPAREs (COMMITs) one flush covered finish under one hold of the
        # manager's lock (PlacedWrites.answer).
        self.prepared = FinishTogether(transactions.prepare_done, transactions.prepares_done)
        self.committed = FinishTogether(transactions.commit_done, transactions.commits_done)
        # Bound once: the batcher groups a turn's writes by this very object.
        self._prepares = self._place_prepares
        self._commits = self._place_commits

    def prepare(self, messages: list[Message], producer_group: str, tx_id: str | None,
                answered: Answered) -> asyncio.Future:
        """Queue a PREPARE of ``messages`` (plain: they passed ``check_message`` as they
        were decoded) for the end of this turn; raises ServerBusy when the server stops."""
        return self.batcher.submit_grouped(self._prepares, (messages, producer_group, tx_id),
                                           self.prepared, answered,
                                           UNSHARED if tx_id is None else touches(producer_group,
                                                                                 tx_id))

    def commit(self, producer_group: str, tx_id: str, answered: Answered) -> asyncio.Future:
        """Queue a COMMIT for the end of this turn."""
        return self.batcher.submit_grouped(self._commits, (producer_group, tx_id),
                                           self.committed, answered,
                                           touches(producer_group, tx_id))

    def _place_prepares(self, items: list[tuple[list[Message], str, str | None]]
                        ) -> list[Any]:
        return self.transactions.place_prepares(items)

    def _place_commits(self, items: list[tuple[str, str]]) -> list[Any]:
        outcomes = self.transactions.place_commits(items)
        for i, placed in enumerate(outcomes):
            if placed is None:  # being ended or relocated: a worker thread waits for that
                group, tx_id = items[i]
                outcomes[i] = asyncio.ensure_future(_in_thread(
                    self.ctx, _same, _commit_in_thread, self.ctx, group, tx_id)), None
            elif type(placed) is TxState:  # it had ended already
                outcomes[i] = placed, None
        return outcomes


def touches(producer_group: str, tx_id: Any) -> tuple[str, str] | None:
    """The state a PREPARE or COMMIT of ``tx_id`` touches, as the send pipeline's
    :func:`~fmq.server.ops.batcher.by_kind` asks: its transaction, or for an id of a scope
    (or a scope's mark) the whole scope, since a mark changes what its scope's other ids
    may do; None for a malformed id (its write is placed where it came)."""
    if type(tx_id) is not str:
        return None
    return producer_group, scope_of(tx_id) or tx_id


_STEPS: weakref.WeakKeyDictionary[Any, TxSteps] = weakref.WeakKeyDictionary()


def tx_steps(ctx: ServerContext) -> TxSteps:
    """The server's :class:`TxSteps` (one per send pipeline: its writes are grouped by
    it); ``ctx`` must have started (its pipeline exists) and be :func:`pipelined`."""
    steps = _STEPS.get(ctx.batcher)
    if steps is None:
        steps = _STEPS[ctx.batcher] = TxSteps(ctx)
    return steps


async def _in_thread(ctx: ServerContext, answer: Callable[[Any], Any],
                     fn: Callable[..., Any], *args: Any) -> Any:
    return answer(await ctx.write(fn, *args))


def _commit_in_thread(ctx: ServerContext, producer_group: str, tx_id: str) -> TxState:
    """Commit (blocking); the pulls of its queues wake once the index has the messages."""
    broker: Broker = ctx.broker
    return broker.transactions.commit(tx_id, producer_group)
