"""Consumer-group offsets as log records: a commit (of one queue, or a reset of several) is
one batch of OFFSET records written with the group commit, answered once it is durable
and indexed, so deleting the index, a rebuild or a copy of the log loses none of them.

Two more writers of OFFSET records live here, both behind the same placing lock as the
commits (so a copy never lands after a newer commit of the same queue):

* **retention**: before a segment is deleted, the live offsets whose latest record lies in
  it are written again at the log head (:meth:`ConsumerOffsets.keep_before`);
* **upgrade**: an index from before offsets were in the log holds them only in LMDB; the
  first open writes them to the log once (:meth:`ConsumerOffsets.upgrade`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from fmq.config import BrokerConfig
from fmq.engine.queues import Queues
from fmq.engine.visibility import Visibility
from fmq.errors import IndexCorrupt, IndexUnavailable, OffsetNotReplicated, OffsetOutOfRange
from fmq.index.dispatcher import Dispatcher
from fmq.index.store import IndexStore
from fmq.log.log import Log
from fmq.log.placement import now_ms
from fmq.log.record import NONE, Record, RecordType, encoded_length
from fmq.message import check_name, check_offset, check_queue_id, check_topic

logger = logging.getLogger("fmq.broker")

#: (topic, queue id, next offset) of one queue of a commit.
QueueOffset = tuple[str, int, int]
#: How long one wait for the index lasts before the dispatcher's health is checked again.
_INDEX_POLL_S = 1.0


class ConsumerOffsets:
    """The offset writes of one broker; ``check_open()`` raises once the broker is
    closed."""

    def __init__(self, log_: Log, index: IndexStore, dispatcher: Dispatcher,
                 config: BrokerConfig, queues: Queues, check_open: Callable[[], None],
                 visibility: Visibility | None = None) -> None:
        self.log = log_
        self.visibility = visibility
        self.index = index
        self.dispatcher = dispatcher
        self.config = config
        self.queues = queues
        self.check_open = check_open
        self._place_lock = threading.Lock()
        #: Offsets retention wrote again at the log head, since the broker opened.
        self.copies = 0

    # ------------------------------------------------------------------ commits

    def check(self, consumer_group: str, topic: str, queue_id: int, next_offset: int) -> None:
        """The checks of a commit: names, queue id, and an offset no later than the
        queue's next offset."""
        check_name(consumer_group, "group", allow_none=False)
        check_topic(topic)
        check_queue_id(queue_id, self.queues.queue_count(topic))
        check_offset(next_offset, "next_offset")
        # The write path's next offset counts too: a message acknowledged a moment ago may
        # not be indexed yet, and committing just past it is legitimate.
        end = max(self.index.queue_range(topic, queue_id)[1],
                  self.queues.next_offset(topic, queue_id))
        limit = self.visibility.limit(topic, queue_id) if self.visibility else None
        if limit is not None and next_offset > limit:
            raise OffsetNotReplicated(next_offset, limit)
        if next_offset > end:
            raise OffsetOutOfRange(
                f"next_offset {next_offset} is past the end of queue {queue_id} of topic "
                f"{topic!r}: commit an offset in 0..{end} (the queue's next offset)")

    def commit(self, consumer_group: str, queue_offsets: Sequence[QueueOffset]) -> None:
        """Commit ``consumer_group``'s next offsets of several queues as one batch of records
        (all checked first: a bad one stores none); returns once durable and readable."""
        self.check_open()
        for topic, qid, off in queue_offsets:
            self.check(consumer_group, topic, qid, off)
        if not queue_offsets:
            return
        self._admit()
        with self._place_lock:
            end = self._place([(consumer_group, t, q, off, NONE)
                               for t, q, off in queue_offsets])
        self._wait(end)

    def _admit(self) -> None:
        """Refuse a commit the index could not make readable."""
        dispatcher = self.dispatcher
        if dispatcher.error is not None:
            raise IndexCorrupt(
                f"the index stopped after an error it cannot retry ({dispatcher.error}); the "
                f"consumer offset is not saved. Stop the broker, run `fmq index rebuild` and "
                f"start it again")
        if dispatcher.failing is not None:
            raise IndexUnavailable(
                f"the index cannot be written ({dispatcher.failing}); the consumer offset is "
                f"not saved. FMQ retries by itself: free disk space or fix the disk, then "
                f"commit it again")

    def _place(self, rows: Sequence[tuple[str, str, int, int, int]]) -> int:
        """Place one OFFSET record per (consumer group, topic, queue id, offset, original's
        offset) together (all or none); returns the log offset they end at. Placing lock
        held. The consumer group is stored in the record's ``producer_group`` field."""
        stamp = now_ms()
        records = [Record(RecordType.OFFSET, store_time=stamp, producer_group=g, topic=t,
                          queue_id=q, queue_offset=off, ref_offset=ref)
                   for g, t, q, off, ref in rows]
        with self.log.lock:
            self.log.reserve_locked([encoded_length(r) for r in records])
            for r in records:
                self.log.append_locked(r)
            return self.log.next_offset

    def _wait(self, end: int) -> None:
        """Return once the log below ``end`` is fdatasync'd and indexed, so a read right
        after the answer sees the commit."""
        # fdatasync'd in flush mode async too: the index takes only synced records.
        self.log.wait_durable(end, sync=True)
        self.dispatcher.hurry()
        self._wait_indexed(end)

    def _wait_indexed(self, end: int) -> None:
        while not self.dispatcher.wait_applied(end, _INDEX_POLL_S):
            failing = self.dispatcher.error or self.dispatcher.failing
            if failing is not None:
                raise IndexUnavailable(
                    f"the offset is stored in the log but the index cannot be written "
                    f"({failing}); it becomes readable once the index works again. Free disk "
                    f"space or fix the disk, then commit it again (that is safe)")
            self.check_open()

    # ------------------------------------------------------------------ retention

    def pinned_before(self, offset: int) -> bool:
        """Whether a committed offset's latest OFFSET record lies before ``offset``."""
        return any(0 <= src < offset for _o, src in self.index.consumer_offset_sources().values())

    def keep_before(self, offset: int) -> int:
        """Write again at the log head every committed offset whose latest OFFSET record
        lies before ``offset`` (retention is about to delete it); returns how many. The
        caller made sure the index covers the log up to ``offset``."""
        if not self.pinned_before(offset):
            return 0
        with self._place_lock:
            # Every commit placed before we took the lock must be indexed first: the copy
            # reads the index and must not undo a newer commit of the same queue. (Up to
            # this offset only: in flush mode async nobody else may sync what follows.)
            placed = self.log.next_offset
            self.log.wait_durable(placed, sync=True)
            self._wait_indexed(placed)
            old = [(g, t, q, off, src) for (g, t, q), (off, src)
                   in sorted(self.index.consumer_offset_sources().items()) if 0 <= src < offset]
            end = self._place(old) if old else 0
        if old:
            self._wait(end)
            self.copies += len(old)
            logger.info("retention wrote %d consumer offsets again at the log head", len(old))
        return len(old)

    # ------------------------------------------------------------------ upgrade

    def upgrade(self) -> int:
        """Write the offsets an index from before offsets were in the log holds (only
        there) to the log, once; returns how many."""
        if self.index.offsets_in_log():
            return 0
        legacy = sorted(self.index.consumer_offsets().items())
        with self._place_lock:
            end = self._place([(g, t, q, off, NONE) for (g, t, q), off in legacy]) if legacy else 0
        if legacy:
            self._wait(end)
            logger.warning("wrote %d consumer offsets kept only in the index to the log "
                           "(a data directory from before offsets were log records)",
                           len(legacy))
        self.index.mark_offsets_in_log()
        return len(legacy)
