"""The high watermark (Kafka's): in a ``sync`` broker group consumers see only the
messages that every fail-over keeps.

A message is *visible* once its record lies below the visible end: on a primary in
``sync`` mode the offset ``min_insync`` followers hold durably, on a follower the
primary's visible end as its last fetch answer said it (and never past its own durable
end). A consumer that read past it could commit an offset a fail-over then gives to other,
acknowledged messages, and the group would skip them for good.

The gate is kept here, beside the index rather than in it: the index keeps taking every
flushed record (transaction ends, consumer offsets, timers and the epoch history must be
current whatever the followers do), and each queue remembers the first queue offset whose
record lies past the visible end. Queue offsets follow log order within a queue, so that
one number per queue is the whole gate: :meth:`Visibility.limit`, which every read of a
queue (pull, tag pull, queue range, lookups) and every offset commit consults.

Without a gate (a single broker, ``async`` mode) nothing is recorded and every read sees
the whole index.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from fmq.log.log import Log
from fmq.log.reader import OnCorruption, OpenSegmentSource
from fmq.log.record import QueueEntry, Record, RecordType
from fmq.log.scanner import LogScanner

Queue = tuple[str, int]

#: The records that create a consume-queue entry (the REF's own position decides when a
#: committed transactional message becomes visible, not its PRE_MESSAGE's).
_QUEUED = frozenset((RecordType.MESSAGE, RecordType.TX_MESSAGE, RecordType.REF_MESSAGE))


class Visibility:
    """Per queue, the queue offsets whose records lie past the visible end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._end: int | None = None  # None: no gate
        self._resume: tuple[int, int] | None = None  # (visible end, max record size)
        #: Per queue: (record end, queue offset) of its hidden messages, in log order.
        self._hidden: dict[Queue, deque[tuple[int, int]]] = {}
        #: Called with the queues whose messages became visible (long polls wake on it).
        self.on_visible: Callable[[set[Queue]], None] | None = None

    @property
    def gated(self) -> bool:
        return self._end is not None

    @property
    def end(self) -> int | None:
        """The visible end (a log offset), None without a gate."""
        return self._end

    def resume_at(self, end: int, max_record_size: int) -> None:
        """A node changing role keeps its visible end: when :meth:`gate` starts, the
        messages the log holds from ``end`` on stay hidden too (not only those appended
        later), until the new role's watermark passes them."""
        self._resume = (end, max_record_size)

    def gate(self, log_: Log) -> None:
        """Gate from now on: messages ``log_`` appends from here are hidden until
        :meth:`advance` passes them; what the log holds now stays visible (but from the
        end given to :meth:`resume_at`)."""
        with log_.lock:
            if self._end is not None:
                return
            end = log_.next_offset
            resume = self._resume
            start = end if resume is None else min(resume[0], end)
            with self._lock:
                self._end = start
            if start < end:  # under the log lock: the hidden stay in log order
                self._hide_held(log_, start, end, resume[1])
            dispatch, hide = log_.on_append, self.on_append
            dispatch_entries, hide_entries = log_.on_append_entries, self.on_append_entries

            def on_append(record: Record) -> None:
                if dispatch is not None:
                    dispatch(record)
                hide(record)

            def on_append_entries(placed: list[tuple[int, tuple]]) -> None:
                if dispatch_entries is not None:
                    dispatch_entries(placed)
                hide_entries(placed)

            log_.on_append = on_append
            # A log that had on_append without on_append_entries places sends record by
            # record (Log.takes_message_runs): so it stays.
            if dispatch is None or dispatch_entries is not None:
                log_.on_append_entries = on_append_entries

    def on_append(self, record: Record) -> None:
        """The log calls this for every record it appends (log lock held)."""
        if self._end is None or record.type not in _QUEUED:
            return
        with self._lock:
            self._hide(record.topic, record.queue_id, record.queue_offset,
                       record.log_offset + record.size)

    def on_append_entries(self, placed: list[tuple[int, tuple]]) -> None:
        """:meth:`on_append` for the records of a batch of sends, as ``(end offset, queue
        entry)`` pairs (``Log.append_messages_locked``), and for a transaction's records
        (``Log.hand_over_locked``: a COMMIT's transaction end among them, which hides
        nothing)."""
        if self._end is None:
            return
        with self._lock:
            for end, entry in placed:  # entry: topic, queue id, queue offset, ...
                if type(entry) is QueueEntry:
                    self._hide(entry[0], entry[1], entry[2], end)

    def _hide(self, topic: str, queue_id: int, queue_offset: int, end: int) -> None:
        """Hide a message whose record ends at ``end``, unless the visible end is past it
        already (``_lock`` held)."""
        if end <= self._end:
            return
        key = (topic, queue_id)
        hidden = self._hidden.get(key)
        if hidden is None:
            hidden = self._hidden[key] = deque()
        hidden.append((end, queue_offset))

    def _hide_held(self, log_: Log, start: int, end: int, max_record_size: int) -> None:
        """Hide the messages of the log's records in ``[start, end)``: read through the
        scanner (a follower's lag behind its primary's watermark: a few chunks)."""
        scanner = LogScanner(source=OpenSegmentSource(list(log_.segments)), start_offset=start,
                             max_record_size=max_record_size,
                             on_corruption=OnCorruption.RAISE, copy_body=False)
        for record in scanner:
            if record.log_offset >= end:
                break
            self.on_append(record)

    def advance(self, end: int) -> None:
        """The visible end moved to ``end`` (it never goes back)."""
        woken: set[Queue] = set()
        with self._lock:
            if self._end is None or end <= self._end:
                return
            self._end = end
            for key, hidden in list(self._hidden.items()):
                while hidden and hidden[0][0] <= end:
                    hidden.popleft()
                    woken.add(key)
                if not hidden:
                    del self._hidden[key]
        on_visible = self.on_visible
        if woken and on_visible is not None:
            on_visible(woken)

    def limit(self, topic: str, queue_id: int) -> int | None:
        """The first queue offset of the queue not visible yet (None: all are)."""
        hidden = self._hidden.get((topic, queue_id))
        if not hidden:
            return None
        try:
            return hidden[0][1]
        except IndexError:  # emptied by another thread meanwhile
            return None
