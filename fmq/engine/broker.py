"""The broker: opens a data directory (its lock, recovery), wires the log, the index, the
dispatcher, transactions, checkpoints and retention together, and is the embedded API: its
own methods write messages and keep the directory; its named parts do the rest
(``transactions``, ``reads``, ``deliveries``, ``topics``, ``offsets``, ``inventory``,
``replica``). The raw parts (the log, the index, the dispatcher, the timers...) are private.

Threads: callers append under the log lock (queue offsets are assigned there, so queue
order is log order) and wait for the group commit without it; the dispatcher indexes
flushed records; one maintenance thread runs the async flush, periodic checkpoints and
retention.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

from fmq.config import BrokerConfig
from fmq.datadir import CHECKPOINT_FILE, DataDirLock
from fmq.engine.assembly import assemble, finish_recovery, start_threads
from fmq.engine.idempotence import has_dedup
from fmq.engine.maintenance import Upkeep
from fmq.engine.queues import check_messages, place_messages
from fmq.engine.stats import broker_stats
from fmq.errors import BrokerClosed, FMQError
from fmq.log.commit import PendingFlush
from fmq.log.fileio import OS_IO, FileIO
from fmq.log.flush_stats import Histogram
from fmq.log.record.sizes import check_fits
from fmq.message import Message, SendResult
from fmq.recovery.checkpoint import Checkpoint, remove_stale_temp

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
        self._log, self._index, self._dispatcher = parts.log, parts.index, parts.dispatcher
        self.recovery = report = parts.recovery
        self._tx, self._tx_writer, self._tx_relocator = parts.tx, parts.tx_writer, parts.relocator
        #: Prepare, commit, rollback, feedback: every transaction operation.
        self.transactions = parts.transactions
        #: Pull (all of a queue or by tags), queue ranges, lookups by key and by time,
        #: committed offsets: everything consumable.
        self.reads = parts.reader
        #: Scheduled sends, a consumer group's retries and dead letters (nack, redrive).
        self.deliveries = parts.deliveries
        self._idempotence = parts.idempotence
        self._visibility = parts.visibility
        #: This node's part in a broker group: log ends, copies, terms, the high watermark.
        self.replica = parts.replica
        #: Consumer-group offsets, written as OFFSET records (commits, resets, retention).
        self.offsets = parts.offsets
        #: Topics, groups, disk usage, offset resets (fmq topics / groups / stats).
        self.inventory = parts.inventory
        #: Topic administration: create, alter, delete, describe, list (fmq topic), and
        #: each topic's queue count.
        self.topics = parts.topics
        self._timers = parts.timers
        self._queues, self._admit = parts.queues, parts.admit
        self._checkpointer, self._retention = parts.checkpointer, parts.retention
        self._stop = parts.stop
        if before_writes is not None:
            before_writes(self)
        finish_recovery(parts, cfg)
        # A topic's own retention is a floor raised from the clock: raised before serving,
        # so an index rebuilt from the log hides again what it hid before.
        self.topics.enforce_retention()
        self._closed_scopes = parts.closed_scopes
        start_threads(parts, cfg, Upkeep(checkpoint=self.checkpoint,
                                         roll_back_timed_out=self._retention.roll_back_timed_out,
                                         enforce_retention=self.enforce_retention,
                                         roll_back_closed_scopes=parts.closed_scopes.run))
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
        self._timers.stop()
        try:
            if self._log.failed is None:
                self._log.flush()
            self._dispatcher.stop()
            if self._log.failed is None and self._dispatcher.error is None:
                self._checkpointer.checkpoint(final=True)  # saves the dedup window
        finally:
            # also when the flush above failed: closing LMDB under a running dispatcher
            # hung env.close() (found by the power-loss test)
            self._dispatcher.stop()
            self._index.close()
            self._log.close()
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

    def check_messages(self, messages: Sequence[Message], largest: int = -1) -> None:
        """Raise the typed error of the first message that cannot be stored as it is
        (its own checks, then its topic's: existence, ``max_message_size``), checking what
        the batch's messages share once (``fmq.engine.queue_placement.check_messages``,
        which says what ``largest``, a decoder's knowledge of the batch, tells)."""
        check_messages(messages, self.config, self._queues, largest)

    def check_plain_message(self, message: Message) -> None:
        """:meth:`check_messages` of one message known to pass ``check_message`` (a plain
        send, :func:`fmq.protocol.message_requests.plain_message`): the checks left are its
        topic's (existence, its ``max_message_size``) and its record's size in a segment."""
        # Queues.check_topic's rule, called without its wrapper (a SEND's short step).
        self._queues.check_topic_takes(message.topic, len(message.body))
        check_fits(message, self.config.segment_size)

    def place_requests(self, messages: Sequence[Message], sizes: Sequence[int],
                       packed: bool = False
                       ) -> tuple[Sequence[SendResult], int, dict[int, FMQError]]:
        """The checked messages of several requests (``sizes``: their counts, in order), each
        all or none, placed as :meth:`place_batch` does. Returns the results (``packed``: may
        be PackedResults), the log offset to wait for, each refused request's error by index."""
        self._check_open()
        if has_dedup(messages):  # the one decision: a resend is answered from the window
            return self._idempotence.place_requests(messages, sizes)
        self._admit()
        results, end = place_messages(self._log, self._queues, messages, packed)
        return results, end, {}

    def wait_durable(self, end_offset: int) -> None:
        """Return once the log below ``end_offset`` is durable (written, in flush mode
        ``async``). Raises LogFailed if a write or fsync failed first."""
        self._log.wait_durable(end_offset, sync=self.config.flush_mode == "sync")

    def start_flush(self) -> PendingFlush | None:
        """Take the log's queued records for a flush the caller writes and fdatasyncs
        itself (the server's event loop, through its flusher thread: it needs no
        interpreter lock), then ends with :meth:`end_flush`. None when the flush is left
        to :meth:`wait_durable`: one is under way, nothing is queued, flush mode ``async``,
        or not the usual flush (:meth:`fmq.log.commit.GroupCommit.start_flush`)."""
        if self.config.flush_mode != "sync":
            return None
        return self._log.start_flush()

    def end_flush(self, flush: PendingFlush, error: BaseException | None) -> None:
        """The flush :meth:`start_flush` took is written and synced, or failed with
        ``error`` (the log fails for good, as a failed :meth:`wait_durable` flush)."""
        self._log.end_flush(flush, error)

    @property
    def durable_end(self) -> int:
        """The log offset below which everything is written and fdatasync'd."""
        return self._log.flushed_offset

    @property
    def log_failure(self) -> BaseException | None:
        """The write or fsync failure that failed the log (None: it works)."""
        return self._log.failed

    # ================================================================== consumable

    def wait_indexed(self, timeout: float | None = 10.0) -> bool:
        """Block until everything flushed so far is indexed (consumable)."""
        return self._dispatcher.wait_applied(self._log.flushed_offset, timeout)

    def on_consumable(self, callback: Callable[[set[tuple[str, int]]], None]) -> None:
        """Call ``callback(queues)`` (from the index's or the follower's thread) whenever
        data in those (topic, queue) pairs becomes consumable: the index applied it, or the
        high watermark passed it."""
        self._dispatcher.on_applied = callback
        self._visibility.on_visible = callback

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
        return self._log.flush_stats.snapshot()

    def duplicates_by_topic(self) -> dict[str, int]:
        """Idempotent resends answered from the window since the broker opened, by topic."""
        return dict(self._idempotence.duplicates_by_topic)

    def stats(self) -> dict:
        """Counters and offsets of the running broker (``fmq stats``, STATS)."""
        self._check_open()
        return broker_stats(self._log, self._dispatcher, self._tx, self._tx_relocator,
                            self._retention, self._checkpointer, self.reads,
                            self._idempotence.window, self._closed_scopes)


def _release_after_refused_open(broker: Broker) -> None:
    """A refused open (CorruptLog, ...) must not leak the index, segment fds or threads: a
    caller that retries would run out of descriptors and mappings."""
    dispatcher = getattr(broker, "_dispatcher", None)
    if dispatcher is not None:
        dispatcher.stop()
    for part in ("_index", "_log"):
        if getattr(broker, part, None) is not None:
            getattr(broker, part).close()
    broker._closed = True
    broker._release()
