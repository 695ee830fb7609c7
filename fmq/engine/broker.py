"""The broker: opens a data directory (its lock, recovery), wires the log, the index, the
dispatcher, transactions, checkpoints and retention together, and is the embedded API.

Threads: callers append under the log lock (queue offsets are assigned there, so queue
order is log order) and wait for the group commit without it; the dispatcher indexes
flushed records; one maintenance thread runs the async flush, periodic checkpoints and
retention.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence

from fmq.config import BrokerConfig
from fmq.datadir import CHECKPOINT_FILE, DataDirLock
from fmq.engine.assembly import assemble, finish_recovery, start_threads
from fmq.engine.idempotence import has_dedup
from fmq.engine.maintenance import Upkeep
from fmq.engine.queues import check_messages, place_messages
from fmq.engine.stats import broker_stats
from fmq.errors import BrokerClosed, FMQError
from fmq.log.fileio import OS_IO, FileIO
from fmq.log.flush_stats import Histogram
from fmq.message import Message, ScheduledSend, SendResult, StoredMessage
from fmq.recovery.checkpoint import Checkpoint, remove_stale_temp
from fmq.tx.state import TxState, UncertainTx

logger = logging.getLogger("fmq.broker")


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
             progress: Callable[[int, int], None] | None = None,
             before_writes: Callable[[Broker], None] | None = None) -> Broker:
        """Open (creating if needed) the data directory at ``path`` and run recovery.
        ``progress(done, total)`` is called with replayed bytes during recovery.
        ``before_writes(broker)`` is called once the log is recovered and writable, before
        the broker writes any record of its own (recovery's last pass, timers,
        maintenance): a new primary appends its EPOCH record there, so that every record it
        writes belongs to its term (:func:`fmq.replication.term.open_as_primary`)."""
        broker = cls(path, config or BrokerConfig(), io)
        try:
            broker._open(progress, before_writes)
        except BaseException:
            _release_after_refused_open(broker)
            raise
        return broker

    def _open(self, progress: Callable[[int, int], None] | None,
              before_writes: Callable[[Broker], None] | None) -> None:
        cfg = self.config
        os.makedirs(self.path, exist_ok=True)
        self._lock.acquire()
        remove_stale_temp(os.path.join(self.path, CHECKPOINT_FILE))
        self._closed = False  # recovery's last pass writes (cut transactions, offsets)
        parts = assemble(path=self.path, config=cfg, io=self.io, check_open=self._check_open,
                         progress=progress)
        self.log, self.index, self.dispatcher = parts.log, parts.index, parts.dispatcher
        self.max_record_size = parts.max_record_size
        self.recovery = report = parts.recovery
        self.tx, self.tx_writer, self.tx_relocator = parts.tx, parts.tx_writer, parts.relocator
        #: Prepare, commit, rollback, feedback: every transaction operation.
        self.transactions = parts.transactions
        self.idempotence = parts.idempotence
        self.visibility = parts.visibility
        #: This node's part in a broker group: log ends, copies, terms, the high watermark.
        self.replica = parts.replica
        #: Consumer-group offsets, written as OFFSET records (commits, resets, retention).
        self.offsets = parts.offsets
        #: Topics, groups, disk usage, offset resets (fmq topics / groups / stats).
        self.inventory = parts.inventory
        #: Topic administration: create, alter, delete, describe, list (fmq topic).
        self.topics = parts.topics
        self.timers = parts.timers
        #: Each group's dead-letter redrive runs alone (fmq.engine.retries.redrive).
        self.redrive_locks = parts.redrive_locks
        self._queues, self._admit, self._reader = parts.queues, parts.admit, parts.reader
        self._checkpointer, self._retention = parts.checkpointer, parts.retention
        self._stop = parts.stop
        if before_writes is not None:
            before_writes(self)
        finish_recovery(parts, cfg)
        # A topic's own retention is a floor raised from the clock: raised before serving,
        # so an index rebuilt from the log hides again what it hid before.
        self.topics.enforce_retention()
        start_threads(parts, cfg, Upkeep(checkpoint=self.checkpoint,
                                         roll_back_timed_out=self._retention.roll_back_timed_out,
                                         enforce_retention=self.enforce_retention))
        self._maintenance = parts.maintenance
        logger.info(
            "opened %s: replayed %d records (%d bytes) from %d in %.3fs; log end %d; "
            "%d open transactions; rolled forward %d; torn tail %s",
            self.path, report.records_replayed, report.bytes_replayed, report.start_offset,
            report.seconds, report.end_offset, report.open_transactions,
            len(report.rolled_forward), report.torn_tail,
        )

    def close(self) -> None:
        """Flush, index everything flushed, checkpoint, release the directory."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._maintenance.join()
        self.timers.stop()
        try:
            if self.log.failed is None:
                self.log.flush()
            self.dispatcher.stop()
            if self.log.failed is None and self.dispatcher.error is None:
                self._checkpointer.checkpoint(final=True)  # saves the dedup window
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

    # ================================================================== writing

    def send(self, message: Message) -> SendResult:
        """Append one message; returns once it is durable (sync flush mode)."""
        return self.send_batch([message])[0]

    def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Append several messages in one group commit; all or none are acknowledged."""
        results, end = self.place_batch(messages)
        self.wait_durable(end)
        return results

    def place_batch(self, messages: Sequence[Message], checked: bool = False
                    ) -> tuple[list[SendResult], int]:
        """Place the messages' records (all or none) without waiting for the disk: returns
        their results and their end offset, **not acknowledged** before :meth:`wait_durable`
        of it. ``checked``: every message passed ``check_message`` and ``check_fits``."""
        self._check_open()
        if not checked:
            self.check_messages(messages)
        if not messages:
            return [], 0
        results, end, refused = self.place_requests(messages, (len(messages),))
        if refused:
            raise refused[0]
        return results, end

    def check_messages(self, messages: Sequence[Message]) -> None:
        """Raise the typed error of the first message that cannot be stored as it is
        (its own checks, then its topic's: existence, ``max_message_size``)."""
        check_messages(messages, self.config, self._queues)

    def place_requests(self, messages: Sequence[Message], sizes: Sequence[int],
                       packed: bool = False
                       ) -> tuple[Sequence[SendResult], int, dict[int, FMQError]]:
        """The checked messages of several requests (``sizes``: their counts, in order), each
        all or none, placed as :meth:`place_batch` does. Returns the results (``packed``: may
        be PackedResults), the log offset to wait for, each refused request's error by index."""
        self._check_open()
        if has_dedup(messages):  # the one decision: a resend is answered from the window
            return self.idempotence.place_requests(messages, sizes)
        self._admit()
        results, end = place_messages(self.log, self._queues, messages, packed)
        return results, end, {}

    def wait_durable(self, end_offset: int) -> None:
        """Return once the log below ``end_offset`` is durable (written, in flush mode
        ``async``). Raises LogFailed if a write or fsync failed first."""
        self.log.wait_durable(end_offset, sync=self.config.flush_mode == "sync")

    # The transaction API lives in :class:`fmq.engine.transactions.Transactions`
    # (``self.transactions``); these are its embedded callers' shortcuts.

    def prepare(self, messages: Sequence[Message], producer_group: str,
                tx_id: str | None = None) -> str:
        """:meth:`Transactions.prepare`: a prepared transaction's id, once durable."""
        return self.transactions.prepare(messages, producer_group, tx_id)

    def commit(self, tx_id: str, producer_group: str | None = None) -> TxState:
        """:meth:`Transactions.commit`: make the transaction's messages consumable."""
        return self.transactions.commit(tx_id, producer_group)

    def rollback(self, tx_id: str, producer_group: str | None = None) -> TxState:
        """:meth:`Transactions.rollback`: discard the transaction."""
        return self.transactions.rollback(tx_id, producer_group)

    def queue_count(self, topic: str) -> int:
        """How many queues ``topic`` has: its own setting (``fmq topic``) or
        ``queues_per_topic``, or more when the stored data of the topic uses more (a lower
        setting applies only to new topics)."""
        return self._queues.queue_count(topic)

    # ================================================================== feedback

    def poll_uncertain(self, producer_group: str, max_items: int = 16, lease_ms: int = 5000,
                       wait_ms: int = 0, owner: object = None) -> list[UncertainTx]:
        """:meth:`Transactions.poll_uncertain`: open transactions to check back."""
        return self.transactions.poll_uncertain(producer_group, max_items, lease_ms, wait_ms,
                                                 owner)

    def answer_uncertain(self, tx_id: str, state: TxState, owner: object = None,
                         producer_group: str | None = None) -> TxState:
        """:meth:`Transactions.answer_uncertain`: a producer's feedback answer."""
        return self.transactions.answer_uncertain(tx_id, state, owner, producer_group)

    def release_feedback_leases(self, owner: object) -> int:
        """:meth:`Transactions.release_feedback_leases`: ``owner``'s connection closed."""
        return self.transactions.release_feedback_leases(owner)

    def open_transactions(self) -> list[dict]:
        """:meth:`Transactions.open_transactions`: oldest first."""
        return self.transactions.open_transactions()

    def schedule(self, messages: Sequence[Message], due_ms: int) -> list[ScheduledSend]:
        """Store ``messages`` for delivery at ``due_ms`` (TIMER records; SEND_AT); see
        :meth:`fmq.engine.timers.Timers.schedule`."""
        return self.timers.schedule(messages, due_ms)

    # ================================================================== reading

    def pull(self, topic: str, queue_id: int, offset: int, max_messages: int = 32,
             max_bytes: int | None = None, keep: bool = False, resident: int = 0
             ) -> list[StoredMessage]:
        """Up to ``max_messages`` consumable messages of a queue from queue offset ``offset``
        (below the queue's minimum: from the minimum). ``max_bytes`` stops before the message
        whose stored record would take the bytes read past it (the first is always read).
        ``keep``: keep the records decoded for other readers of them soon (several
        consumers of one queue). ``resident``: read only the log's last that many bytes,
        else raise NotInMemory (fmq.engine.reads) before reading anything."""
        return self._reader.pull(topic, queue_id, offset, max_messages, max_bytes, keep,
                                 resident)

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, next offset) of a queue: what is consumable now."""
        return self._reader.queue_range(topic, queue_id)

    def messages_by_key(self, topic: str, key: str, limit: int = 100,
                        max_bytes: int | None = None) -> list[StoredMessage]:
        """Up to ``limit`` messages of ``topic`` with ``key``. ``max_bytes`` stops once the
        bodies, names and properties read add up to more (the first message always counts)."""
        return self._reader.messages_by_key(topic, key, limit, max_bytes)

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (the next offset when
        none is)."""
        return self._reader.offset_for_time(topic, queue_id, timestamp_ms)

    def commit_offset(self, group: str, topic: str, queue_id: int, next_offset: int) -> None:
        """Record that ``group`` consumed ``topic``/``queue_id`` below ``next_offset`` (an
        OFFSET record): returns once it is fdatasync'd and readable."""
        self.offsets.commit(group, [(topic, queue_id, next_offset)])

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._reader.committed_offset(group, topic, queue_id)

    def all_messages(self, topics: Iterable[str]) -> dict[tuple[str, int], list[StoredMessage]]:
        """Every consumable message of ``topics`` by queue (tools and tests)."""
        return self._reader.all_messages(topics)

    def wait_indexed(self, timeout: float | None = 10.0) -> bool:
        """Block until everything flushed so far is indexed (consumable)."""
        return self.dispatcher.wait_applied(self.log.flushed_offset, timeout)

    def on_consumable(self, callback: Callable[[set[tuple[str, int]]], None]) -> None:
        """Call ``callback(queues)`` (from the index's or the follower's thread) whenever
        data in those (topic, queue) pairs becomes consumable: the index applied it, or the
        high watermark passed it."""
        self.dispatcher.on_applied = callback
        self.visibility.on_visible = callback

    # ================================================================== upkeep

    def checkpoint(self) -> Checkpoint:
        """(1) read the applied offset, (2) sync the index, (3) write min(applied, oldest
        open PREPARE) atomically."""
        return self._checkpointer.checkpoint()

    @property
    def last_checkpoint(self) -> Checkpoint | None:
        return self._checkpointer.last

    def enforce_retention(self, now: float | None = None) -> list[str]:
        """Delete whole segments, oldest first, past ``retention_ms`` or while the log is
        over ``retention_bytes``; never the active one, never one reaching the
        checkpoint's recovery offset (which also protects every open transaction's
        PRE_MESSAGEs). An open transaction whose PREPARE pins a segment due for deletion is
        relocated to the log head first, so an abandoned transaction cannot keep the log
        growing. Returns the deleted file names."""
        self._check_open()
        self.topics.enforce_retention(now)
        return self._retention.enforce(now)

    def flush_histograms(self) -> tuple[Histogram, Histogram]:
        """The group-commit flushes' (latency, size) histograms (metrics)."""
        return self.log.flush_stats.snapshot()

    def duplicates_by_topic(self) -> dict[str, int]:
        """Idempotent resends answered from the window since the broker opened, by topic."""
        return dict(self.idempotence.duplicates_by_topic)

    def stats(self) -> dict:
        """Counters and offsets of the running broker (``fmq stats``, STATS)."""
        self._check_open()
        return broker_stats(self.log, self.dispatcher, self.tx, self.tx_relocator, self._retention,
                            self._checkpointer, self._reader, self.idempotence.window)


def _release_after_refused_open(broker: Broker) -> None:
    """A refused open (CorruptLog, ...) must not leak the index, segment fds or threads: a
    caller that retries would run out of descriptors and mappings."""
    dispatcher = getattr(broker, "dispatcher", None)
    if dispatcher is not None:
        dispatcher.stop()
    for part in ("index", "log"):
        if getattr(broker, part, None) is not None:
            getattr(broker, part).close()
    broker._closed = True
    broker._release()
