"""The broker: wires the log, the index, the dispatcher, the transaction manager,
checkpoints and retention together, and is the embedded API.

Threads: callers append under the log lock (queue offsets are assigned there, so queue
order is log order) and wait for the group commit without it; the dispatcher indexes
flushed records; one maintenance thread runs the async flush, periodic checkpoints and
retention.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from fmq.config import BrokerConfig
from fmq.datadir import (
    CHECKPOINT_FILE,
    INDEX_DIR,
    LOG_DIR,
    QUEUE_FLOORS_FILE,
    DataDirLock,
    index_exists,
)
from fmq.errors import (
    BrokerClosed,
    FMQError,
    IndexCorrupt,
    IndexUnavailable,
    InvalidArgument,
    OffsetOutOfRange,
    StorageError,
)
from fmq.index.dispatcher import Dispatcher
from fmq.index.store import IndexStore, destroy
from fmq.log.crc import crc32c
from fmq.log.fileio import OS_IO, FileIO
from fmq.log.log import Log
from fmq.log.record import HEADER_SIZE, Record, RecordType, decode
from fmq.log.segment import Segment
from fmq.log.sizing import check_fits, encoded_size
from fmq.message import (
    MAX_NAME,
    Message,
    SendResult,
    StoredMessage,
    check_count,
    check_label,
    check_message,
    check_name,
    check_offset,
    check_queue_id,
    check_topic,
)
from fmq.recovery.checkpoint import Checkpoint, remove_stale_temp, write_checkpoint
from fmq.recovery.floors import write_floors
from fmq.recovery.recover import recover
from fmq.tx.manager import PreMessage, Transaction, TxManager
from fmq.tx.state import TxState, UncertainTx

logger = logging.getLogger("fmq.broker")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


#: A record's size beyond its body and properties is at most this (topic, key, tags; the
#: transaction fields are added separately).
_RECORD_BOUND = HEADER_SIZE + 127 + 2 * MAX_NAME


def _reserve_segments(log_: Log, messages: Sequence[Message], overhead: int = 0,
                      first: int = 0) -> None:
    """Create the segments the records of ``messages`` (after one record of ``first``
    bytes) will roll into, before any of them is placed (log lock held), so that a refused
    request stores nothing. Exact sizes cost about a microsecond per message, so they are
    computed only when a rough upper bound does not fit in the active segment."""
    rough = first + sum(len(m.body) for m in messages) + len(messages) * (_RECORD_BOUND
                                                                          + overhead)
    if log_.fits_in_active(rough) and not any(m.properties for m in messages):
        return
    sizes = [first] if first else []
    log_.reserve_locked(sizes + [encoded_size(m, overhead) for m in messages])


class Broker:
    """An open data directory. Use :meth:`Broker.open`; close with :meth:`close` or
    ``with``."""

    def __init__(self, path: str, config: BrokerConfig, io: FileIO) -> None:
        self.path = os.path.abspath(path)
        self.config = config
        self.io = io
        self._closed = True
        self._lock = DataDirLock(self.path)

    # ================================================================== open / close

    @classmethod
    def open(cls, path: str, config: BrokerConfig | None = None, *, io: FileIO = OS_IO,
             progress: Callable[[int, int], None] | None = None) -> Broker:
        """Open (creating if needed) the data directory at ``path`` and run recovery.
        ``progress(done, total)`` is called with replayed bytes during recovery."""
        broker = cls(path, config or BrokerConfig(), io)
        try:
            broker._open(progress)
        except BaseException:
            # a refused open (CorruptLog, ...) must not leak the index, segment fds or
            # threads: a caller that retries would run out of descriptors and mappings
            dispatcher = getattr(broker, "dispatcher", None)
            if dispatcher is not None:
                dispatcher.stop()
            for part in ("index", "log"):
                if getattr(broker, part, None) is not None:
                    getattr(broker, part).close()
            broker._release()
            raise
        return broker

    def _open(self, progress: Callable[[int, int], None] | None) -> None:
        cfg = self.config
        os.makedirs(self.path, exist_ok=True)
        self._lock.acquire()
        remove_stale_temp(os.path.join(self.path, CHECKPOINT_FILE))
        self.log = Log(os.path.join(self.path, LOG_DIR), cfg.segment_size, self.io)
        # Segments keep the size they were created with: a smaller configured size must
        # not make the decoder reject the larger records of older segments.
        self.max_record_size = max([cfg.max_record_size] + [s.size for s in self.log.segments])
        index_path = os.path.join(self.path, INDEX_DIR)
        rebuilt = not index_exists(index_path)
        try:
            self.index = IndexStore(index_path, cfg.index_map_size)
        except IndexCorrupt as exc:
            logger.warning("index unusable (%s): rebuilding it from the log", exc)
            destroy(index_path)
            self.index = IndexStore(index_path, cfg.index_map_size)
            rebuilt = True
        if rebuilt:
            self.index.clear_derived()
        self.tx = TxManager(cfg.max_open_transactions, cfg.tx_finished_memory,
                            cfg.tx_check_after_ms, cfg.tx_check_max_interval_ms,
                            lookup_finished=self._indexed_tx_end)
        report, queue_next = recover(self.path, self.log, self.index, self.tx,
                                     max_record_size=self.max_record_size,
                                     batch=cfg.dispatch_batch, index_rebuilt=rebuilt,
                                     progress=progress)
        self.log.start_at(report.end_offset)
        self._queue_next: dict[tuple[str, int], int] = queue_next
        self._round_robin: dict[str, int] = {}
        self.dispatcher = Dispatcher(self.log, self.index, cfg.dispatch_batch,
                                     self.max_record_size, report.end_offset,
                                     cfg.dispatch_max_pending,
                                     cfg.index_retry_initial_ms / 1000.0,
                                     cfg.index_retry_max_ms / 1000.0)
        self.log.on_flushed = self.dispatcher.notify_flushed
        self.log.on_append = self.dispatcher.on_append
        self.dispatcher.start()
        self._closed = False
        # Roll back prepares a crash cut short: they can never be committed (the client was
        # never told they were stored). A committing one cannot be incomplete (its commit
        # was asked after the prepare was durable); roll it forward like the others.
        for tx in [t for t in self.tx.open.values()
                   if not t.complete and t.state != TxState.COMMITTING]:
            logger.warning("rolling back transaction %r of group %r: a crash cut its prepare "
                           "short (%d of %d messages in the log)", tx.tx_id,
                           tx.producer_group, len(tx.messages), tx.expected_messages)
            self._write_rollback(tx)
        # Roll forward transactions whose commit was cut short (REF/TX durable, no COMMIT).
        for tx in [t for t in self.tx.open.values() if t.state == TxState.COMMITTING]:
            if not tx.complete:
                logger.error("transaction %r is committing but its prepare is incomplete "
                             "(%d of %d messages): committing what the log holds", tx.tx_id,
                             len(tx.messages), tx.expected_messages)
            tx.prepared = True
            self._commit_tx(tx)
            report.rolled_forward.append(tx.tx_id)
        report.open_transactions = len(self.tx.open)
        self.recovery = report
        self.tx_relocations = 0  # open transactions retention rewrote at the log head
        self.tx_timeouts = 0  # transactions tx_timeout_ms rolled back
        self.last_checkpoint: Checkpoint | None = None
        self._stop = threading.Event()
        self._maintenance = threading.Thread(target=self._maintain, name="fmq-maintenance",
                                             daemon=True)
        self._maintenance.start()
        logger.info(
            "opened %s: replayed %d records (%d bytes) from %d in %.3fs; log end %d; "
            "%d open transactions; rolled forward %d; torn tail %s",
            self.path, report.records_replayed, report.bytes_replayed, report.start_offset,
            report.seconds, report.end_offset, report.open_transactions,
            len(report.rolled_forward), report.torn_tail,
        )

    def _indexed_tx_end(self, tx_id: str) -> TxState | None:
        end = self.index.tx_end(tx_id)
        if end is None:
            return None
        return TxState.COMMIT if end[0] else TxState.ROLLBACK

    def close(self) -> None:
        """Flush, index everything flushed, checkpoint, release the directory."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._maintenance.join()
        try:
            if self.log.failed is None:
                self.log.flush()
            self.dispatcher.stop()
            if self.log.failed is None and self.dispatcher.error is None:
                self.checkpoint()
        finally:
            # also when the flush above failed: closing LMDB under a running dispatcher
            # hung env.close() (found by the power-loss test)
            self.dispatcher.stop()
            self.index.close()
            self.log.close()
            self._release()

    def _release(self) -> None:
        self._lock.release()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerClosed("the broker is closed; open it again with fmq.Broker.open")

    # ================================================================== plain messages

    def _pick_queue(self, msg: Message) -> int:
        n = self.config.queues_per_topic
        if msg.queue_id is not None:
            return msg.queue_id
        if msg.key:
            return crc32c(msg.key.encode()) % n
        rr = self._round_robin.get(msg.topic, 0)
        self._round_robin[msg.topic] = rr + 1
        return rr % n

    def send(self, message: Message) -> SendResult:
        """Append one message; returns once it is durable (sync flush mode)."""
        return self.send_batch([message])[0]

    def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Append several messages in one group commit; all or none are acknowledged."""
        self._check_open()
        cfg = self.config
        for m in messages:
            check_message(m, cfg.max_message_size, cfg.queues_per_topic)
            check_fits(m, cfg.segment_size)
        if not messages:
            return []
        self._refuse_unless_indexable()
        results = []
        store_time = now_ms()
        log_ = self.log
        with log_.lock:
            _reserve_segments(log_, messages)  # all or nothing
            for m in messages:
                qid = self._pick_queue(m)
                qkey = (m.topic, qid)
                qoff = self._queue_next.get(qkey, 0)
                rec = Record(RecordType.MESSAGE, store_time=store_time, queue_id=qid,
                             queue_offset=qoff, topic=m.topic, key=m.key or None,
                             tags=m.tags or None, properties=m.properties, body=bytes(m.body))
                log_.append_locked(rec)
                self._queue_next[qkey] = qoff + 1
                results.append(SendResult(rec.log_offset, qid, qoff))
            end = log_.next_offset
        log_.wait_durable(end, sync=cfg.flush_mode == "sync")
        return results

    def _refuse_unless_indexable(self) -> None:
        """Refuse new messages the index could not make consumable soon: acknowledged must
        keep meaning consumable once indexed, not stored in the log for a restart to find."""
        dispatcher = self.dispatcher
        if dispatcher.error is not None:
            raise IndexCorrupt(
                f"the index stopped after an error it cannot retry ({dispatcher.error}); new "
                f"messages are refused because consumers would never see them. Stop the "
                f"broker, run `fmq index rebuild {self.path}` and start it again")
        if dispatcher.failing is not None:
            raise IndexUnavailable(
                f"the index cannot be written ({dispatcher.failing}); new messages are refused "
                f"until it can. FMQ retries by itself: free disk space or fix the disk, then "
                f"send again")
        limit = self.config.index_max_lag_bytes
        lag = self.log.flushed_offset - dispatcher.applied_offset
        if limit and lag > limit:
            raise IndexUnavailable(
                f"the index is {lag} bytes behind the log (index_max_lag_bytes {limit}); new "
                f"messages are refused until it catches up. Send again after a short wait")

    # ================================================================== transactions

    def prepare(self, messages: Sequence[Message], producer_group: str,
                tx_id: str | None = None) -> str:
        """Store ``messages`` as a prepared transaction; nothing is consumable until commit.
        Returns the transaction id once PREPARE and every PRE_MESSAGE are durable."""
        self._check_open()
        cfg = self.config
        check_name(producer_group, "producer_group", allow_none=False)
        if tx_id is None:
            from fmq.tx.ids import new_tx_id

            tx_id = new_tx_id()
        check_name(tx_id, "tx_id", allow_none=False)
        if not messages:
            raise InvalidArgument("a transaction needs at least one message")
        if len(messages) > cfg.max_messages_per_transaction:
            raise InvalidArgument(
                f"a transaction may hold at most {cfg.max_messages_per_transaction} messages "
                f"(max_messages_per_transaction); got {len(messages)}")
        overhead = len(tx_id.encode()) + len(producer_group.encode())
        for m in messages:
            check_message(m, cfg.max_message_size, cfg.queues_per_topic)
            check_fits(m, cfg.segment_size, overhead)
        self._refuse_unless_indexable()
        store_time = now_ms()
        log_ = self.log
        with self.tx.lock:
            self.tx.reserve(tx_id)
            with log_.lock:
                _reserve_segments(log_, messages, overhead, first=HEADER_SIZE + overhead)
                # ref_size = the message count: recovery proves the prepare complete by it.
                prep = Record(RecordType.PREPARE, store_time=store_time, tx_id=tx_id,
                              producer_group=producer_group, ref_size=len(messages))
                log_.append_locked(prep)
                tx = Transaction(tx_id, producer_group, prep.log_offset, store_time,
                                 expected_messages=len(messages))
                self.tx.register(tx)
                try:
                    for m in messages:
                        qid = self._pick_queue(m)
                        rec = Record(RecordType.PRE_MESSAGE, store_time=store_time, queue_id=qid,
                                     topic=m.topic, tx_id=tx_id, producer_group=producer_group,
                                     key=m.key or None, tags=m.tags or None,
                                     properties=m.properties, body=bytes(m.body))
                        log_.append_locked(rec)
                        tx.messages.append(PreMessage.of(rec))
                except BaseException:
                    self.tx.forget(tx_id)
                    raise
                end = log_.next_offset
        try:
            log_.wait_durable(end, sync=True)
        except BaseException:
            with self.tx.lock:
                self.tx.forget(tx_id)
            raise
        with self.tx.lock:
            tx.prepared = True
        self.tx.notify()
        return tx_id

    def commit(self, tx_id: str) -> TxState:
        """Make every message of the transaction consumable (REF/TX records, then COMMIT).
        Idempotent: committing a committed transaction answers COMMIT."""
        self._check_open()
        check_label(tx_id, "tx_id", allow_none=False)
        with self.tx.lock:
            found = self.tx.get_for_end(tx_id, TxState.COMMIT)
        if isinstance(found, TxState):
            return found
        with found.busy:
            with self.tx.lock:  # it may have ended while we waited for `busy`
                again = self.tx.get_for_end(tx_id, TxState.COMMIT)
            if isinstance(again, TxState):
                return again
            self._commit_tx(found)
        return TxState.COMMIT

    def transaction_queues(self, tx_id: str) -> set[tuple[str, int]]:
        """The (topic, queue id) pairs an open transaction's messages go to; empty when it
        is not open. Lets the server wake only the readers of those queues on a commit."""
        with self.tx.lock:
            tx = self.tx.open.get(tx_id)
            return {(m.topic, m.queue_id) for m in tx.messages} if tx is not None else set()

    def _commit_tx(self, tx: Transaction) -> None:
        """Write the missing REF/TX records and the COMMIT, wait for durability, forget the
        transaction. Also used by recovery's roll-forward."""
        cfg = self.config
        log_ = self.log
        pending = [m for m in tx.messages if m.queue_offset < 0]
        bodies: dict[int, Record] = {}

        def pre_record(m: PreMessage) -> Record:
            if m.offset not in bodies:
                bodies[m.offset] = self._read_record(m.offset, m.size)
            return bodies[m.offset]

        for m in pending:  # read outside the log lock what will surely be copied
            if m.body_size < cfg.tx_copy_threshold:
                pre_record(m)
        store_time = now_ms()
        with log_.lock:
            # A REF or TX record is never larger than its PRE_MESSAGE.
            log_.reserve_locked([m.size for m in pending] + [
                HEADER_SIZE + len(tx.tx_id.encode()) + len(tx.producer_group.encode())])
            tx.state = TxState.COMMITTING  # after the reservation: a refusal changes nothing
            for m in pending:
                qkey = (m.topic, m.queue_id)
                qoff = self._queue_next.get(qkey, 0)
                ref = Record(RecordType.REF_MESSAGE, store_time=store_time, queue_id=m.queue_id,
                             queue_offset=qoff, ref_offset=m.offset, ref_size=m.size,
                             topic=m.topic, tx_id=tx.tx_id, key=m.key, tags=m.tags)
                active = log_.active_segment
                copy = (m.body_size < cfg.tx_copy_threshold or active is None
                        or m.offset < active.base
                        or not log_.fits_in_active(self._ref_size(ref)))
                if copy:
                    pre = pre_record(m)
                    ref.type = RecordType.TX_MESSAGE
                    ref.properties = pre.properties
                    ref.body = pre.body
                log_.append_locked(ref)
                self._queue_next[qkey] = qoff + 1
                m.queue_offset = qoff
            commit = Record(RecordType.COMMIT, store_time=store_time, tx_id=tx.tx_id,
                            producer_group=tx.producer_group, ref_offset=tx.prepare_offset)
            log_.append_locked(commit)
            end = log_.next_offset
        log_.wait_durable(end, sync=True)
        with self.tx.lock:
            self.tx.finish(tx.tx_id, TxState.COMMIT)

    @staticmethod
    def _ref_size(ref: Record) -> int:
        return (HEADER_SIZE + len(ref.topic.encode()) + len(ref.tx_id.encode())
                + len((ref.key or "").encode()) + len((ref.tags or "").encode()))

    def rollback(self, tx_id: str) -> TxState:
        """Discard the transaction (ROLLBACK record). Idempotent; a conflict after commit."""
        self._check_open()
        check_label(tx_id, "tx_id", allow_none=False)
        with self.tx.lock:
            found = self.tx.get_for_end(tx_id, TxState.ROLLBACK)
        if isinstance(found, TxState):
            return found
        with found.busy:
            with self.tx.lock:
                again = self.tx.get_for_end(tx_id, TxState.ROLLBACK)
            if isinstance(again, TxState):
                return again
            self._write_rollback(found)
        return TxState.ROLLBACK

    def _read_record(self, offset: int, size: int) -> Record:
        """The record stored at ``offset`` (``size`` bytes), decoded and checked."""
        return decode(self.log.read(offset, size), 0, base_offset=offset,
                      max_record_size=self.max_record_size)

    def _write_rollback(self, tx: Transaction) -> None:
        """Append the transaction's ROLLBACK record, wait until it is durable, and forget
        the transaction."""
        log_ = self.log
        with log_.lock:
            rec = Record(RecordType.ROLLBACK, store_time=now_ms(), tx_id=tx.tx_id,
                         producer_group=tx.producer_group, ref_offset=tx.prepare_offset)
            log_.append_locked(rec)
            end = log_.next_offset
        log_.wait_durable(end, sync=True)
        with self.tx.lock:
            self.tx.finish(tx.tx_id, TxState.ROLLBACK)

    def poll_uncertain(self, producer_group: str, max_items: int = 16, lease_ms: int = 5000,
                       wait_ms: int = 0, owner: object = None) -> list[UncertainTx]:
        """Feedback: open transactions of ``producer_group`` older than ``tx_check_after_ms``
        and not leased to another poller, with their messages. Long-polls up to
        ``wait_ms``. Each is leased to ``owner`` (an opaque token, e.g. the server's
        connection; None for embedded callers) for ``lease_ms``, lowered to
        ``max_feedback_lease_ms``. The broker never decides; the producer answers with
        commit/rollback (or nothing, for "unknown")."""
        self._check_open()
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
                    pre = self._read_record(m.offset, m.size)
                    body = pre.body
                    props = pre.properties or {}
                except Exception:  # noqa: BLE001 - a body we cannot read is still offered
                    body, props = b"", {}
                msgs.append({"topic": m.topic, "queue_id": m.queue_id, "key": m.key,
                             "tags": m.tags, "properties": props, "body": bytes(body),
                             "offset": m.offset})
            out.append(UncertainTx(t.tx_id, t.producer_group, t.prepare_offset, t.store_time,
                                   t.checks, msgs))
        return out

    def answer_uncertain(self, tx_id: str, state: TxState, owner: object = None) -> TxState:
        """A producer's answer to a feedback offer: commit, rollback or unknown. Commit and
        rollback are accepted from anyone (they are idempotent and the producer group
        decides); unknown returns the lease only when ``owner`` holds it."""
        check_label(tx_id, "tx_id", allow_none=False)
        try:
            state = TxState(state)
        except ValueError:
            raise InvalidArgument(f"a feedback answer is commit, rollback or unknown, not "
                                  f"{state!r}") from None
        if state == TxState.COMMIT:
            return self.commit(tx_id)
        if state == TxState.ROLLBACK:
            return self.rollback(tx_id)
        if state == TxState.UNKNOWN:
            self.tx.release_lease(tx_id, owner)
            return TxState.UNKNOWN
        raise InvalidArgument(f"a feedback answer is commit, rollback or unknown, not {state.value}")

    def release_feedback_leases(self, owner: object) -> int:
        """Return every feedback lease ``owner`` holds (its connection closed): those
        transactions are offered to the next poll at once. Returns how many."""
        return self.tx.release_leases(owner)

    def open_transactions(self) -> list[dict]:
        """Open transactions, oldest first: id, group, state, age, checks, messages, offset."""
        return self.tx.list_open(now_ms())

    # ================================================================== reading

    def pull(self, topic: str, queue_id: int, offset: int, max_messages: int = 32,
             max_bytes: int | None = None) -> list[StoredMessage]:
        """Up to ``max_messages`` consumable messages of a queue from queue offset ``offset``.
        An offset below the queue's minimum (deleted by retention) starts at the minimum.
        ``max_bytes`` stops before the message whose stored record would take the bytes
        read past it (the first message is always read)."""
        self._check_open()
        check_topic(topic)
        check_queue_id(queue_id, self.config.queues_per_topic)
        check_offset(offset)
        check_count(max_messages, "max_messages")
        lo, _hi = self.index.queue_range(topic, queue_id)
        entries = self.index.queue_entries(topic, queue_id, max(offset, lo), max_messages)
        out = []
        read = 0
        for qoff, doff, dsize, _th, st in entries:
            if max_bytes is not None:
                read += dsize
                if out and read > max_bytes:
                    break
            try:
                data = self.log.read(doff, dsize)
            except OffsetOutOfRange:
                if doff < self.log.first_offset:
                    continue  # retention deleted its segment after we read the index
                raise
            rec = decode(data, 0, base_offset=doff, max_record_size=self.max_record_size)
            out.append(StoredMessage(topic, queue_id, qoff, doff, rec.body, rec.key, rec.tags,
                                     rec.properties or {}, st))
        return out

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, next offset) of a queue: what is consumable now."""
        self._check_open()
        check_topic(topic)
        check_queue_id(queue_id, self.config.queues_per_topic)
        return self.index.queue_range(topic, queue_id)

    def messages_by_key(self, topic: str, key: str, limit: int = 100,
                        max_bytes: int | None = None) -> list[StoredMessage]:
        """Up to ``limit`` messages of ``topic`` with ``key``. ``max_bytes`` stops once the
        bodies, names and properties read add up to more (the first message always counts)."""
        self._check_open()
        check_topic(topic)
        check_label(key, "key", allow_none=False)
        out = []
        read = 0
        for qid, qoff in self.index.key_lookup(topic, key, limit):
            for m in self.pull(topic, qid, qoff, 1)[:1]:
                if m.key != key:
                    continue
                out.append(m)
                read += (len(m.body) + len(m.topic) + len(key) + len(m.tags or "")
                         + sum(len(k) + len(v) for k, v in m.properties.items()))
            if max_bytes is not None and read >= max_bytes:
                break
        return out

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (the next offset when
        none is)."""
        self._check_open()
        check_topic(topic)
        check_queue_id(queue_id, self.config.queues_per_topic)
        check_offset(timestamp_ms, "timestamp_ms")
        found = self.index.offset_for_time(topic, queue_id, timestamp_ms)
        return self.index.queue_range(topic, queue_id)[1] if found is None else found

    def commit_offset(self, group: str, topic: str, queue_id: int, next_offset: int) -> None:
        """Record that ``group`` consumed ``topic``/``queue_id`` below ``next_offset``. It
        survives a process kill at once; a power loss only after the next checkpoint."""
        self._check_open()
        check_name(group, "group", allow_none=False)
        check_topic(topic)
        check_queue_id(queue_id, self.config.queues_per_topic)
        check_offset(next_offset, "next_offset")
        # The write path's next offset counts too: a message acknowledged a moment ago may
        # not be indexed yet, and committing just past it is legitimate.
        end = max(self.index.queue_range(topic, queue_id)[1],
                  self._queue_next.get((topic, queue_id), 0))
        if next_offset > end:
            raise OffsetOutOfRange(
                f"next_offset {next_offset} is past the end of queue {queue_id} of topic "
                f"{topic!r}: commit an offset in 0..{end} (the queue's next offset)")
        self.index.commit_offset(group, topic, queue_id, next_offset)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        self._check_open()
        check_name(group, "group", allow_none=False)
        check_topic(topic)
        check_queue_id(queue_id, self.config.queues_per_topic)
        return self.index.committed_offset(group, topic, queue_id)

    def wait_indexed(self, timeout: float | None = 10.0) -> bool:
        """Block until everything flushed so far is indexed (consumable)."""
        return self.dispatcher.wait_applied(self.log.flushed_offset, timeout)

    # ================================================================== checkpoint

    def checkpoint(self) -> Checkpoint:
        """(1) read the applied offset, (2) sync the index, (3) write min(applied, oldest
        open PREPARE) atomically."""
        applied = self.dispatcher.applied_offset
        oldest = self.tx.oldest_prepare_offset()
        recovery = applied if oldest is None else min(applied, oldest)
        try:
            self.index.sync()
            cp = write_checkpoint(os.path.join(self.path, CHECKPOINT_FILE), recovery, applied,
                                  self.log.next_offset, self.io)
        except OSError as exc:
            # The previous checkpoint file is intact (replaced only by rename): recovery
            # just replays more. Say so in FMQ's terms rather than as a bare OSError.
            raise StorageError(
                f"could not write the checkpoint ({exc}); the previous one stays valid and "
                f"nothing acknowledged is at risk. Free space or fix the disk; the next "
                f"checkpoint retries") from exc
        previous, self.last_checkpoint = self.last_checkpoint, cp
        moved = previous is None or (previous.recovery_offset, previous.applied_offset) != (
            recovery, applied)
        # One line when it moved; an idle broker does not repeat itself every interval.
        logger.log(logging.INFO if moved else logging.DEBUG,
                   "checkpoint: recovery offset %d (applied %d)", recovery, applied)
        return cp

    # ================================================================== retention

    def enforce_retention(self, now: float | None = None) -> list[str]:
        """Delete whole segments, oldest first, past ``retention_ms`` or while the log is
        over ``retention_bytes``; never the active one, never one reaching the
        checkpoint's recovery offset (which also protects every open transaction's
        PRE_MESSAGEs). An open transaction whose PREPARE pins a segment due for deletion is
        relocated to the log head first, so an abandoned transaction cannot keep the log
        growing. Returns the deleted file names."""
        self._check_open()
        cfg = self.config
        if not cfg.retention_ms and not cfg.retention_bytes:
            return []
        floor = self._retention_floor()
        now = time.time() if now is None else now
        deleted = []
        relocated: set[str] = set()
        while True:
            segs = list(self.log.segments)
            if len(segs) < 2:
                break
            seg = segs[0]
            if seg is self.log.active_segment:
                break
            total = sum(s.size for s in segs)
            too_old = bool(cfg.retention_ms) and (
                now - os.stat(seg.path).st_mtime) * 1000 > cfg.retention_ms
            too_big = bool(cfg.retention_bytes) and total > cfg.retention_bytes
            if not (too_old or too_big):
                break
            if seg.end > floor:
                # Open transactions whose PREPARE lies in this segment pin it (and every
                # later one): move them to the log head, then the checkpoint can pass it.
                if not self._relocate_pinning(seg, relocated):
                    break
                floor = self._retention_floor()
                if seg.end > floor:
                    break
            if not deleted:  # before the first deletion: queues it empties keep their marks
                write_floors(os.path.join(self.path, QUEUE_FLOORS_FILE),
                             {q: hi for q, (_lo, hi) in self.index.all_queues().items()},
                             self.io)
            self.log.delete_segment(seg)
            deleted.append(seg.name)
        if deleted:
            self.index.remove_before(self.log.first_offset)
            logger.info("retention deleted %d segments: %s", len(deleted), ", ".join(deleted))
        return deleted

    def _retention_floor(self) -> int:
        """The lowest offset retention must keep: the checkpoint's recovery offset (taken
        now), which is at or before every open transaction's PREPARE."""
        floor = self.checkpoint().recovery_offset
        oldest = self.tx.oldest_prepare_offset()
        return floor if oldest is None else min(floor, oldest)

    def _relocate_pinning(self, seg: Segment, done: set[str]) -> bool:
        """Relocate the open transactions whose PREPARE lies before ``seg.end``. False when
        one of them cannot move (committing, being ended, or already moved in this run:
        a transaction larger than the retention limit moves at most once per run)."""
        with self.tx.lock:
            pinning = [t for t in self.tx.open.values() if t.prepare_offset < seg.end]
        if not pinning:
            return True  # the floor is the index's progress, not a transaction
        for tx in sorted(pinning, key=lambda t: t.prepare_offset):
            if tx.tx_id in done or not self._relocate(tx):
                return False
            done.add(tx.tx_id)
        return True

    def _relocate(self, tx: Transaction) -> bool:
        """Rewrite an open transaction at the log head: a PREPARE whose ``ref_offset`` names
        the current one, then copies of its PRE_MESSAGEs, in one group commit. Recovery
        takes the copy only once it is complete, so a crash at any point leaves one whole
        copy; the in-memory transaction switches to the copy once it is durable."""
        if not tx.busy.acquire(blocking=False):
            return False  # being committed or rolled back right now
        try:
            with self.tx.lock:
                if (self.tx.open.get(tx.tx_id) is not tx or tx.state != TxState.OPEN
                        or not tx.prepared or tx.referenced):
                    return False
                messages = list(tx.messages)
            pres = [self._read_record(m.offset, m.size) for m in messages]
            log_ = self.log
            with log_.lock:
                prep = Record(RecordType.PREPARE, store_time=tx.store_time, tx_id=tx.tx_id,
                              producer_group=tx.producer_group, ref_size=len(pres),
                              ref_offset=tx.prepare_offset)
                log_.append_locked(prep)
                moved = []
                for pre in pres:
                    rec = Record(RecordType.PRE_MESSAGE, store_time=pre.store_time,
                                 queue_id=pre.queue_id, topic=pre.topic, tx_id=tx.tx_id,
                                 producer_group=tx.producer_group, key=pre.key, tags=pre.tags,
                                 properties=pre.properties, body=bytes(pre.body))
                    log_.append_locked(rec)
                    moved.append(PreMessage.of(rec))
                end = log_.next_offset
            log_.wait_durable(end, sync=True)
            old_offset = tx.prepare_offset
            with self.tx.lock:
                tx.prepare_offset = prep.log_offset
                tx.messages = moved
            self.tx_relocations += 1
            logger.info("retention relocated open transaction %r (%d messages) from %d to %d",
                        tx.tx_id, len(moved), old_offset, prep.log_offset)
            return True
        finally:
            tx.busy.release()

    def _roll_back_timed_out(self) -> None:
        """``tx_timeout_ms``: roll back transactions open longer than that."""
        limit = self.config.tx_timeout_ms / 1000.0
        now = time.monotonic()
        with self.tx.lock:
            due = [t for t in self.tx.open.values() if t.state == TxState.OPEN and t.prepared
                   and now - t.registered_at > limit]
        for tx in due:
            try:
                self.rollback(tx.tx_id)
            except FMQError as exc:  # committed meanwhile (conflict), closed broker, ...
                logger.info("tx_timeout_ms: transaction %r not rolled back: %s", tx.tx_id, exc)
                continue
            self.tx_timeouts += 1
            logger.warning("rolled back transaction %r of group %r: open for more than "
                           "tx_timeout_ms (%d ms) with no decision", tx.tx_id,
                           tx.producer_group, self.config.tx_timeout_ms)

    # ================================================================== stats & upkeep

    def stats(self) -> dict:
        self._check_open()
        flushed = self.log.flushed_offset
        applied = self.dispatcher.applied_offset
        open_txs = self.tx.list_open(now_ms())
        return {
            "log_start": self.log.first_offset,
            "log_end": self.log.next_offset,
            "flushed_offset": flushed,
            "applied_offset": applied,
            "index_lag": max(0, flushed - applied),
            "segments": len(self.log.segments),
            "flushes": self.log.flush_count,
            "open_transactions": len(open_txs),
            "oldest_transaction_age_ms": max((t["age_ms"] for t in open_txs), default=0),
            "feedback_checks_sent": self.tx.checks_sent,
            "tx_relocations": self.tx_relocations,
            "tx_timeouts": self.tx_timeouts,
            "log_failed": str(self.log.failed) if self.log.failed else None,
            "dispatcher_error": str(self.dispatcher.error) if self.dispatcher.error else None,
            "index_error": str(self.dispatcher.failing) if self.dispatcher.failing else None,
            "index_retries": self.dispatcher.retries,
            "last_checkpoint": self.last_checkpoint.to_dict() if self.last_checkpoint else None,
        }

    def _maintain(self) -> None:
        cfg = self.config
        next_cp = time.monotonic() + cfg.checkpoint_interval_ms / 1000.0
        next_ret = time.monotonic() + cfg.retention_interval_ms / 1000.0
        tick = cfg.flush_interval_ms / 1000.0 if cfg.flush_mode == "async" else 0.2
        while not self._stop.wait(tick):
            try:
                if cfg.flush_mode == "async":
                    self.log.flush()
                now = time.monotonic()
                if cfg.checkpoint_interval_ms and now >= next_cp:
                    self.checkpoint()
                    next_cp = now + cfg.checkpoint_interval_ms / 1000.0
                if cfg.tx_timeout_ms:
                    self._roll_back_timed_out()
                if cfg.retention_interval_ms and now >= next_ret:
                    self.enforce_retention()
                    next_ret = now + cfg.retention_interval_ms / 1000.0
            except Exception:  # noqa: BLE001 - reported, the next tick tries again
                logger.exception("background maintenance failed")

    def all_messages(self, topics: Iterable[str]) -> dict[tuple[str, int], list[StoredMessage]]:
        """Every consumable message of ``topics`` by queue (tools and tests)."""
        out = {}
        for topic in topics:
            for qid in range(self.config.queues_per_topic):
                lo, hi = self.index.queue_range(topic, qid)
                msgs = []
                off = lo
                while off < hi:
                    batch = self.pull(topic, qid, off, 256)
                    if not batch:
                        break
                    msgs.extend(batch)
                    off = batch[-1].queue_offset + 1
                out[(topic, qid)] = msgs
        return out
