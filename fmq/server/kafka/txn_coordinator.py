"""Kafka's transaction coordinator on FMQ's transactions (docs/kafka.md, *Exactly-once*).

A Kafka transaction is a set of FMQ prepared transactions of the producer group
:data:`~fmq.server.kafka.txn_store.PRODUCER_GROUP`, one per Produce request and partition,
with the id ``PRODUCER_ID.EPOCH.NUMBER.PARTITION.BASE_SEQUENCE.TOPIC`` (NUMBER counts the
id's transactions): a resent batch is the same
FMQ transaction (FMQ answers a retried PREPARE without writing it again), and the producer
id and epoch in every id say which Kafka transaction it belongs to.

EndTxn first writes its decision (the id's state record ``prepare_commit`` or
``prepare_abort``), then FMQ's COMMIT or ROLLBACK for each of them, then the consumer
offsets sent with the transaction (a commit's decision, COMMITs and offsets made durable
by one fsync: the log is durable as a prefix, so no COMMIT survives without its
decision), then the state ``empty``. After a crash anywhere in
between, :meth:`TxnCoordinator.recover` finishes the decision: every FMQ transaction of a
decided Kafka transaction is committed (or rolled back) and its offsets written, so either
both the output and the offsets are there or neither. FMQ's own roll-forward and
incomplete-prepare rules hold for each FMQ transaction unchanged.

Every state change runs under one lock: the coordinator's state is small and its changes
are fsync'd records, and one order of them is what makes fencing exact (a fenced producer's
Produce can never slip in after the epoch bump that fenced it).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
import weakref
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from fmq.errors import FMQError, LogFailed
from fmq.message import Message
from fmq.protocol import Op
from fmq.server.cluster.fencing import follower_refusal
from fmq.server.context import ServerContext
from fmq.server.kafka.error_codes import error_code
from fmq.server.kafka.txn_prepares import PendingPrepare, prepare_together
from fmq.server.kafka.txn_store import (
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PRODUCER_GROUP,
    TxnState,
    load_states,
    write_state,
)

logger = logging.getLogger("fmq.server.kafka")

MAX_EPOCH = 32_767
_MAX_TX_ID = 255


class TxnRefused(Exception):
    """A transactional request refused with a Kafka error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


#: The first version of each transactional request whose answer may say PRODUCER_FENCED
#: (KIP-588); older versions get INVALID_PRODUCER_EPOCH for it, as Kafka answers them:
#: a client of an older version knows no PRODUCER_FENCED (aiokafka took it for an unknown
#: error instead of learning it was fenced).
PRODUCER_FENCED_SINCE = {0: 9, 24: 2, 25: 2, 26: 2, 28: 3}


def for_version(code: ErrorCode, api_key: int, version: int) -> ErrorCode:
    """``code`` as a request of ``version`` of ``api_key`` understands it."""
    if code == ErrorCode.producer_fenced and version < PRODUCER_FENCED_SINCE[api_key]:
        return ErrorCode.invalid_producer_epoch
    return code


_coordinators: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def coordinator(ctx: ServerContext) -> TxnCoordinator:
    """The server's one transaction coordinator."""
    found = _coordinators.get(ctx)
    if found is None:
        found = _coordinators[ctx] = TxnCoordinator(ctx)
    return found


def start_transaction_recovery(ctx: ServerContext) -> asyncio.Future:
    """The coordinator's background round (:meth:`TxnCoordinator.run`): on a primary,
    from the moment it serves (at start, and on a promoted follower at its promotion), it
    finishes every Kafka transaction left decided and aborts the ones past their time-out;
    on a follower it waits (its log changes only by what its primary ships)."""
    return asyncio.ensure_future(coordinator(ctx).run())


def fmq_tx_id(state: TxnState, topic: str, partition: int, base_sequence: int) -> str:
    """The FMQ transaction id of one Produce batch of ``state``'s transaction."""
    tx_id = f"{state.fmq_prefix}{partition}.{base_sequence}.{topic}"
    if len(tx_id.encode()) > _MAX_TX_ID:  # a long topic name: its digest keeps it unique
        digest = hashlib.sha256(topic.encode()).hexdigest()
        tx_id = f"{state.fmq_prefix}{partition}.{base_sequence}.#{digest}"
    return tx_id


class TxnCoordinator:
    """The transactional ids of one server, their producers, epochs and open transactions."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.lock = asyncio.Lock()
        self.states: dict[str, TxnState] | None = None
        #: Transactional Produces' prepares not yet taken by a batch (:meth:`produce`).
        self._pending: list[PendingPrepare] = []

    # ------------------------------------------------------------------ state

    async def _loaded(self) -> dict[str, TxnState]:
        if self.states is None:
            self.states = await self.ctx.read(load_states, self.ctx.broker)
        return self.states

    async def recover(self) -> int:
        """Finish every decided transaction (a crash, or a fail-over, inside EndTxn);
        returns how many. Until then a request on such an id is answered as Kafka does
        while a transaction ends (CONCURRENT_TRANSACTIONS), or finishes it itself
        (InitProducerId, EndTxn)."""
        async with self.lock:
            await self._loaded()
            return await self._finish_decided()

    async def run(self, period: float = 1.0) -> None:
        """Every ``period`` on a primary: finish the decided transactions, then abort every
        transaction older than its transaction.timeout.ms (Kafka's rule: nobody asks the
        producer, unlike FMQ's own check-back). A round the log refuses (a new primary
        whose followers are not in sync yet, a fenced or closing log) is tried again."""
        while True:
            if follower_refusal(self.ctx.replication, Op.PREPARE) is None:
                try:
                    await self.recover()
                    await self.expire(int(time.time() * 1000))
                except FMQError as exc:
                    logger.info("kafka transactions not finished or timed out yet: %s", exc)
            await asyncio.sleep(period)

    async def expire(self, now_ms: int) -> int:
        """Abort the open transactions whose time-out passed and bump their epoch, so the
        producer that left them learns it was fenced; returns how many."""
        async with self.lock:
            states = await self._loaded()
            late = [s for s in states.values() if s.state == ONGOING
                    and s.started_ms + s.timeout_ms <= now_ms]
            for state in late:
                logger.info("kafka transaction %r (producer %d, epoch %d) timed out after "
                            "%d ms: aborted", state.transactional_id, state.producer_id,
                            state.epoch, state.timeout_ms)
                await self._decide(state, False)
                if state.epoch + 1 < MAX_EPOCH:
                    state.epoch += 1
                    await self._write(state)
            return len(late)

    async def _finish_decided(self) -> int:
        assert self.states is not None
        decided = [s for s in self.states.values() if s.state in (PREPARE_COMMIT, PREPARE_ABORT)]
        for state in decided:
            logger.info("kafka transaction %r (producer %d, epoch %d): finishing its %s "
                        "decided before a restart or fail-over", state.transactional_id,
                        state.producer_id, state.epoch, state.state)
            await self._complete(state, state.state == PREPARE_COMMIT)
        return len(decided)

    async def _write(self, state: TxnState, durable: bool = True) -> None:
        """Store ``state``; ``durable`` False: without waiting for its fsync, for the two
        records whose loss a crash makes harmless. ``ongoing``: nothing of the transaction
        is durable before the first of its prepares (or offsets), whose fsync takes the
        record along. ``empty`` after an ending: the COMMITs or ROLLBACKs are durable
        already, and a lost ``empty`` leaves the decision, which the roll-forward carries
        out again (idempotent) after the restart."""
        await self.ctx.write(write_state, self.ctx.broker, state, durable)
        assert self.states is not None
        self.states[state.transactional_id] = state

    def _owner(self, transactional_id: str, producer_id: int, epoch: int) -> TxnState:
        """The state of ``transactional_id`` when this producer and epoch own it."""
        assert self.states is not None
        state = self.states.get(transactional_id)
        if state is None or state.producer_id != producer_id:
            raise TxnRefused(ErrorCode.invalid_producer_id_mapping,
                             f"producer id {producer_id} does not own transactional id "
                             f"{transactional_id!r}; call InitProducerId first")
        if epoch < state.epoch:
            raise TxnRefused(ErrorCode.producer_fenced,
                             f"producer epoch {epoch} of transactional id "
                             f"{transactional_id!r} was fenced by epoch {state.epoch}: a "
                             f"newer producer with this id started")
        if epoch > state.epoch:
            raise TxnRefused(ErrorCode.invalid_producer_epoch,
                             f"producer epoch {epoch} is newer than the coordinator's "
                             f"{state.epoch} for {transactional_id!r}")
        return state

    # ------------------------------------------------------------------ requests

    async def init_producer(self, transactional_id: str, timeout_ms: int) -> TxnState:
        """InitProducerId with a transactional id: abort whatever the previous producer
        left open, then bump the epoch (a new producer id when the epoch is exhausted),
        fencing every older producer of the id."""
        async with self.lock:
            states = await self._loaded()
            old = states.get(transactional_id)
            if old is not None and old.state != EMPTY:
                await self._decide(old, old.state == PREPARE_COMMIT)
            if old is not None and old.epoch + 1 < MAX_EPOCH:
                pid, epoch = old.producer_id, old.epoch + 1
            else:
                pid, epoch = secrets.randbits(62), 0
            state = TxnState(transactional_id, pid, epoch, EMPTY, timeout_ms)
            await self._write(state)
            return state

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int
                             ) -> None:
        """AddPartitionsToTxn / AddOffsetsToTxn: the transaction is open from now on."""
        async with self.lock:
            await self._loaded()
            state = self._owner(transactional_id, producer_id, epoch)
            await self._begin(state)

    async def _begin(self, state: TxnState) -> None:
        if state.state in (PREPARE_COMMIT, PREPARE_ABORT):
            raise TxnRefused(ErrorCode.concurrent_transactions,
                             "the previous transaction is still ending; retry")
        if state.state == EMPTY:
            state.state, state.started_ms = ONGOING, int(time.time() * 1000)
            state.number += 1
            await self._write(state, durable=False)

    def _ongoing(self, transactional_id: str, producer_id: int, epoch: int,
                 opening_call: str) -> TxnState:
        """The id's state when this producer owns it and its transaction is open;
        INVALID_TXN_STATE naming the call that opens it otherwise."""
        state = self._owner(transactional_id, producer_id, epoch)
        if state.state != ONGOING:
            raise TxnRefused(ErrorCode.invalid_txn_state,
                             f"no open transaction of {transactional_id!r}: {opening_call} "
                             f"first")
        return state

    async def produce(self, transactional_id: str, producer_id: int, epoch: int,
                      topic: str, partition: int, base_sequence: int,
                      messages: Sequence[Message]) -> None:
        """One partition's records of a transactional Produce, as one FMQ prepared
        transaction: durable, invisible until EndTxn commits. The prepares that arrive in
        one turn of the event loop (the partitions of a Produce request) are written
        together, made durable by one flush (:mod:`~fmq.server.kafka.txn_prepares`)."""
        pending = PendingPrepare(transactional_id, producer_id, epoch, topic, partition,
                                 base_sequence, messages)
        self._pending.append(pending)
        await asyncio.sleep(0)  # the request's other partitions queue theirs meanwhile
        async with self.lock:
            if self._pending and not pending.done.done():
                batch, self._pending = self._pending, []
                await self._prepare(batch)
        pending.done.result()  # set by whoever wrote its batch: raises its refusal

    async def _prepare(self, batch: list[PendingPrepare]) -> None:
        """Check each prepare of ``batch`` against its id's owner and open transaction,
        then write the accepted ones together (the lock held throughout: fencing is as
        exact as for one prepare); every one's ``done`` is set on return."""
        try:
            await self._loaded()
            accepted = []
            for item in batch:
                try:
                    state = self._ongoing(item.transactional_id, item.producer_id,
                                          item.epoch, "add the partition (AddPartitionsToTxn)")
                except TxnRefused as exc:
                    item.done.set_exception(exc)
                    continue
                accepted.append((item, fmq_tx_id(state, item.topic, item.partition,
                                                 item.base_sequence)))
            if not accepted:
                return
            try:
                outcomes = await self.ctx.write(
                    prepare_together, self.ctx.broker,
                    [(item.messages, tx_id) for item, tx_id in accepted])
            except FMQError as exc:  # the flush failed: none of them is prepared
                outcomes = [exc] * len(accepted)
            for (item, _), outcome in zip(accepted, outcomes, strict=True):
                if outcome is None:
                    item.done.set_result(None)
                else:
                    item.done.set_exception(TxnRefused(error_code(outcome), str(outcome)))
        finally:
            for item in batch:  # the write itself raised (or this task was cancelled)
                if not item.done.done():
                    item.done.set_exception(TxnRefused(
                        ErrorCode.unknown_server_error,
                        "the prepare was interrupted before it was known to be durable; "
                        "send the batch again"))

    async def offset_commit(self, transactional_id: str, producer_id: int, epoch: int,
                            group: str, offsets: list[tuple[str, int, int]]) -> None:
        """TxnOffsetCommit: the offsets commit with the transaction (kept in its state
        record, written by EndTxn's commit)."""
        async with self.lock:
            await self._loaded()
            state = self._ongoing(transactional_id, producer_id, epoch,
                                  "call AddOffsetsToTxn")
            broker = self.ctx.broker
            for topic, partition, offset in offsets:
                end = (await self.ctx.read(broker.reads.queue_range, topic, partition))[1]
                if not 0 <= offset <= end:
                    raise TxnRefused(ErrorCode.offset_out_of_range,
                                     f"offset {offset} is outside queue {partition} of "
                                     f"topic {topic!r} (0..{end}); commit an offset read")
            state.offsets += [[group, topic, partition, offset]
                              for topic, partition, offset in offsets]
            await self._write(state)

    async def end(self, transactional_id: str, producer_id: int, epoch: int,
                  commit: bool) -> None:
        """EndTxn: commit or abort the open transaction."""
        async with self.lock:
            await self._loaded()
            state = self._owner(transactional_id, producer_id, epoch)
            if state.state == EMPTY:
                return  # nothing was added: nothing to end (a retried EndTxn lands here)
            if state.state in (PREPARE_COMMIT, PREPARE_ABORT) and \
                    (state.state == PREPARE_COMMIT) != commit:
                raise TxnRefused(ErrorCode.invalid_txn_state,
                                 f"the transaction of {transactional_id!r} is already "
                                 f"ending with {state.state}")
            await self._decide(state, commit)

    # ------------------------------------------------------------------ ending

    async def _decide(self, state: TxnState, commit: bool) -> None:
        """Decide, then carry the decision out. The decision's record waits for no fsync
        of its own: the COMMITs (or ROLLBACKs) placed after it make it durable with them
        (see :func:`_carry_out`)."""
        decided = PREPARE_COMMIT if commit else PREPARE_ABORT
        decision_end = 0
        if state.state != decided:
            before = state.state, state.offsets
            state.state = decided
            if not commit:
                state.offsets = []
            try:
                decision_end = await self.ctx.run(write_state, self.ctx.broker, state, False)
            except BaseException:  # not placed: no COMMIT may follow it, it stays open
                state.state, state.offsets = before
                raise
        await self._complete(state, commit, decision_end)

    async def _complete(self, state: TxnState, commit: bool, decision_end: int = 0) -> None:
        """COMMIT (with its offsets, one fsync for all) or ROLLBACK every FMQ transaction
        of the decided transaction, then the state ``empty``. Every step is idempotent (a
        restart repeats them). ``decision_end``: where the decision's record, placed but
        maybe not durable yet, ends (0: durable already)."""
        broker = self.ctx.broker
        tx_ids = await self.ctx.read(_open_fmq_transactions, broker, state.fmq_prefix)
        # One write: in ``sync`` acknowledgement mode it waits for the followers to hold
        # everything it flushed, the decision too.
        await self.ctx.write(_carry_out, broker, state, tx_ids, commit, decision_end)
        state.state, state.offsets, state.started_ms = EMPTY, [], 0
        await self._write(state, durable=False)


def _carry_out(broker, state: TxnState, tx_ids: list[str], commit: bool,
               decision_end: int) -> None:
    """The COMMITs and offsets, or the ROLLBACKs, of ``state``'s decided transaction;
    returns once they and the decision's record (ending at ``decision_end``) are durable
    (blocking).

    The decision needs no fsync of its own: it was placed before these records, the log
    is durable as a prefix and recovery cuts a torn tail at its first broken record, so
    a COMMIT never survives a crash without the decision before it. A decision that
    survived without its COMMITs is rolled forward (:meth:`TxnCoordinator.recover`); a
    crash that loses the decision lost every record after it too, and the transaction
    is open, as before EndTxn (which was not answered)."""
    if commit:
        _commit_together(broker, state, tx_ids)
    else:
        for tx_id in tx_ids:  # each durable on return, the decision before it too
            broker.transactions.rollback(tx_id, PRODUCER_GROUP)
    broker.wait_durable(decision_end)  # nothing after it (no prepare, no offsets)


def _commit_together(broker, state: TxnState, tx_ids: list[str]) -> None:
    """The COMMITs of every FMQ transaction of ``state``'s transaction and its offsets'
    records, made durable by one fsync (blocking), which also takes along the decision
    placed before them (:func:`_carry_out`). A COMMIT found after a crash always has
    its decision before it (the log is durable as a prefix), and one lost is written
    again by the decision's roll-forward."""
    placed = []
    failure: BaseException | None = None
    try:
        for tx_id in tx_ids:
            found = broker.transactions.place_commit(PRODUCER_GROUP, tx_id)
            if found is None:  # being ended or relocated right now: wait for that
                broker.transactions.commit(tx_id, PRODUCER_GROUP)
            elif isinstance(found, tuple):  # else it had ended already
                placed.append(found)
        by_group: dict[str, list[tuple[str, int, int]]] = {}
        for group, topic, partition, offset in state.offsets:
            by_group.setdefault(group, []).append((topic, partition, offset))
        for group, rows in by_group.items():
            # Durable once it returns, and with it every COMMIT placed before.
            if not _commit_offsets(broker, state, group, rows):
                for row in rows:  # one is refused: the others still commit
                    _commit_offsets(broker, state, group, [row])
        if placed:
            broker.wait_durable(max(end for _, end in placed))  # no offsets: the one fsync
    except BaseException as exc:
        failure = exc
        raise
    finally:
        for tx, _ in placed:
            broker.transactions.commit_done(tx, failure)


def _commit_offsets(broker, state: TxnState, group: str,
                    rows: list[tuple[str, int, int]]) -> bool:
    """Commit ``group``'s offsets sent with the transaction; False when one was refused
    (checked at TxnOffsetCommit, its topic deleted since: none of ``rows`` is stored)."""
    try:
        broker.offsets.commit(group, rows)
    except LogFailed:
        raise
    except FMQError as exc:
        logger.warning("kafka transaction %r: offsets %s for group %r not committed: %s",
                       state.transactional_id, rows, group, exc)
        return False
    return True


def _open_fmq_transactions(broker, prefix: str) -> list[str]:
    return [t["tx_id"] for t in broker.transactions.open_transactions()
            if t["producer_group"] == PRODUCER_GROUP and t["tx_id"].startswith(prefix)]
