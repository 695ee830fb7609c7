"""The read side (``Broker.reads``): pull from a queue (all of it, or only the messages a
tag expression selects), queue ranges, lookups by key and by time, consumer group
offsets. Everything read here is what the index made consumable, below the high watermark.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from fmq.config import BrokerConfig
from fmq.engine.bad_records import BadRecords
from fmq.engine.log_reads import read_records
from fmq.engine.queues import Queues
from fmq.engine.tag_filter import Entry, pull_tagged
from fmq.engine.visibility import Visibility
from fmq.errors import BadRecord, IncompleteRecord
from fmq.index.store import IndexStore
from fmq.log.log import Log
from fmq.log.record import decode_at
from fmq.message import (
    HIDDEN_PROPERTIES,
    MAX_OFFSET,
    PRINCIPAL_PROPERTY,
    PRODUCER_ID_PROPERTY,
    StoredMessage,
    check_count,
    check_label,
    check_name,
    check_offset,
    check_queue_id,
    check_topic,
    parse_tag_expression,
)


class Kept(NamedTuple):
    """A message a pull's caller kept in a form of its own (the server: encoded), in the
    pull's answer in place of the message: neither read nor decoded again."""

    form: Any
    queue_offset: int
    body_size: int


#: What a pull's caller kept of the message of an index entry: (its form, the length of its
#: body), or None (see :meth:`Reader.pull_answer`).
KeptLookup = Callable[[Entry], "tuple[Any, int] | None"]


class NotInMemory(Exception):
    """A pull limited to the log's last bytes (``resident``) would read older records, which
    may need the disk: its caller reads them where a disk wait blocks nobody else."""


class StoredPull(NamedTuple):
    """An untagged pull's index entries and the bytes of their records as the log stores
    them, undecoded (:meth:`Reader.pull_stored`, :meth:`Reader.pull_records`): for a caller
    that turns them into its own form itself (the Kafka door: a record batch, in C; the
    server: a PULL answer's messages, in C), and decodes them with :func:`stored_message`
    where it does not."""

    entries: list[Entry]
    #: Each entry's record bytes; None where retention deleted it after the index was read;
    #: (:meth:`Reader.pull_records` given ``kept``) what the caller kept of its message.
    records: list[Any]
    min_offset: int
    next_offset: int


class PullAnswer(NamedTuple):
    """A pull's messages and its queue's range, read once for the pull: the first offset
    kept, the next offset (the high watermark's, when gated), and where to pull from next
    (past the messages a tag filter skipped)."""

    messages: list[StoredMessage]  # and Kept ones, when the pull was given ``kept``
    min_offset: int
    next_offset: int
    resume_offset: int


class Reader:
    """Reads of one broker; ``check_open()`` raises once the broker is closed."""

    def __init__(self, log_: Log, index: IndexStore, config: BrokerConfig, queues: Queues,
                 max_record_size: int, check_open: Callable[[], None],
                 visibility: Visibility) -> None:
        self._log = log_
        #: The high watermark: no read returns a message past it.
        self._visibility = visibility
        self._index = index
        self._config = config
        self._queues = queues
        self._max_record_size = max_record_size
        self._check_open = check_open
        self.bad_records = BadRecords()
        #: Messages and body bytes returned per topic since the broker opened (metrics).
        self.messages_out: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        self._out_lock = threading.Lock()

    def pull(self, topic: str, queue_id: int, offset: int, max_messages: int = 32,
             max_bytes: int | None = None, *, tags: str | None = None,
             resident: int = 0) -> list[StoredMessage]:
        """Up to ``max_messages`` consumable messages of a queue from queue offset ``offset``
        (below the queue's minimum: from the minimum). ``max_bytes`` stops before the message
        whose stored record would take the bytes read past it (the first is always read).
        ``tags``: a tag expression (``"a || b"``; ``"*"`` or None: every message); only the
        messages it selects, found by the index's tag hashes (fmq.engine.tag_filter).
        ``resident`` (an untagged pull): read only the log's last that many bytes, else
        raise NotInMemory before reading anything. :meth:`pull_answer` says also where to
        pull from next and the queue's range."""
        return self.pull_answer(topic, queue_id, offset, max_messages, max_bytes, tags=tags,
                                resident=resident).messages

    def pull_answer(self, topic: str, queue_id: int, offset: int, max_messages: int = 32,
                    max_bytes: int | None = None, *, tags: str | None = None,
                    resident: int = 0, kept: KeptLookup | None = None) -> PullAnswer:
        """:meth:`pull`, with the queue's range (read once, before the messages: no message
        is past its next offset) and the offset to pull from next.

        ``kept`` (an untagged pull): ``kept(entry)`` is what the caller kept of the
        message of that index entry in a form of its own (the server: its encoded bytes),
        as (that form, the length of the message's body), or None; a kept message is
        neither read nor decoded, and stands in the answer's messages as a :class:`Kept`."""
        selected = parse_tag_expression(tags)
        self._check_open()
        check_topic(topic)
        check_queue_id(queue_id, self._queues.queue_count(topic))
        check_offset(offset)
        check_count(max_messages, "max_messages")
        if selected is None:
            lo, hi, entries = self._visible_entries(topic, queue_id, offset, max_messages)
            start = max(offset, lo)
            out = self._pull_entries(topic, queue_id, entries, max_bytes, resident, kept)
            resume = out[-1].queue_offset + 1 if out else start
        else:
            lo, hi = self._range(topic, queue_id)
            start = max(offset, lo)
            out, resume = pull_tagged(
                lambda pos, n: self._index.queue_entries(topic, queue_id, pos, n),
                lambda entries, budget: self._read_entries(topic, queue_id, entries, budget),
                start, hi, selected, max_messages, max_bytes)
        if out:
            self._count_out(topic, out)
        return PullAnswer(out, lo, hi, resume)

    def pull_stored(self, topic: str, queue_id: int, offset: int, max_messages: int,
                    max_bytes: int | None) -> StoredPull:
        """The entries an untagged :meth:`pull_answer` would read, and their records'
        bytes, undecoded and not yet counted out (the caller counts what it returns with
        :meth:`count_out`). Where a record is None, or :func:`stored_message` refuses one,
        the caller pulls again with :meth:`pull_answer`, which skips and reports those as a
        pull does."""
        self._check_open()
        check_topic(topic)
        check_queue_id(queue_id, self._queues.queue_count(topic))
        check_offset(offset)
        check_count(max_messages, "max_messages")
        lo, hi, entries = self._visible_entries(topic, queue_id, offset, max_messages,
                                                max_bytes)
        entries = entries[:_fitting(entries, max_bytes)]
        records = read_records(self._log, [(e[1], e[2]) for e in entries])
        return StoredPull(entries, records, lo, hi)

    def pull_records(self, topic: str, queue_id: int, offset: int, max_messages: int,
                     max_bytes: int | None, resident: int = 0,
                     kept: KeptLookup | None = None) -> StoredPull:
        """The entries an untagged :meth:`pull_answer` would read (the same checks, the same
        ``resident`` rule) and, per entry, what ``kept`` holds of its message ((its form,
        its body's length)) or else its record's bytes, undecoded (None where retention
        deleted it), not counted out: for a caller that turns them into its own form
        itself (the server: a PULL answer's messages, in C). Where that fails, it pulls
        again with :meth:`pull_answer`, which skips and reports a damaged record.
        :meth:`pull_entries` then :meth:`records_of`, for a caller that looks at the
        entries before it reads their records."""
        found = self.pull_entries(topic, queue_id, offset, max_messages, max_bytes, resident)
        entries = found.entries
        if not entries:
            return found
        return StoredPull(entries, self.records_of(entries, kept), found.min_offset,
                          found.next_offset)

    def pull_entries(self, topic: str, queue_id: int, offset: int, max_messages: int,
                     max_bytes: int | None, resident: int = 0) -> StoredPull:
        """:meth:`pull_records` without the records (``records`` empty): the entries, the
        queue's range, the checks and the ``resident`` rule."""
        self._check_open()
        check_topic(topic)
        check_queue_id(queue_id, self._queues.queue_count(topic))
        check_offset(offset)
        check_count(max_messages, "max_messages")
        lo, hi, entries = self._visible_entries(topic, queue_id, offset, max_messages)
        if not entries:
            return StoredPull(entries, [], lo, hi)
        if resident and entries[0][1] < self._log.next_offset - resident:
            raise NotInMemory(f"the pull reads records older than the log's last {resident} "
                              "bytes")
        taken = _fitting(entries, max_bytes)
        if taken < len(entries):
            entries = entries[:taken]
        return StoredPull(entries, [], lo, hi)

    def records_of(self, entries: list[Entry], kept: KeptLookup | None = None) -> list[Any]:
        """:meth:`pull_records`'s records of ``entries`` (from :meth:`pull_entries`)."""
        if kept is None:
            return read_records(self._log, [(e[1], e[2]) for e in entries])
        records: list[Any] = [kept(e) for e in entries]
        missing = [i for i, hit in enumerate(records) if hit is None]
        if missing:
            for i, data in zip(missing, read_records(
                    self._log, [(entries[i][1], entries[i][2]) for i in missing]), strict=True):
                records[i] = data
        return records

    def nothing_from(self, topic: str, queue_id: int, offset: int) -> int | None:
        """Where a pull from ``offset`` would resume when the queue's tail in memory
        (:mod:`fmq.index.queue_tails`) shows nothing consumable at or past it: ``offset``,
        or the queue's minimum when above; None when it may (read the queue). Only a
        queue a pull read before has a tail, so its topic passed the read's checks; the
        checks whose outcome may have changed since are made again (the broker open, the
        queue id within the topic's count), raising as the read does."""
        tail = self._index.tails.get(topic, queue_id)
        if tail is None or offset < tail.hi or offset > MAX_OFFSET:
            return None
        self._check_open()
        check_queue_id(queue_id, self._queues.queue_count(topic))
        lo = tail.lo
        return offset if offset > lo else lo

    def _visible_entries(self, topic: str, queue_id: int, offset: int, max_messages: int,
                         max_bytes: int | None = None) -> tuple[int, int, list[Entry]]:
        """The queue's range and up to ``max_messages`` entries from ``offset`` (with
        ``max_bytes``: no more than fit it), in one read of the index; the visibility limit
        after it, as for every read of the range (a hidden entry is hidden before the index
        holds it)."""
        lo, hi, entries = self._index.queue_read(topic, queue_id, offset, max_messages,
                                                 max_bytes)
        hi = self._visible_end(topic, queue_id, lo, hi)
        if entries and entries[-1][0] >= hi:
            entries = [e for e in entries if e[0] < hi]
        return lo, hi, entries

    @property
    def max_record_size(self) -> int:
        """The largest record the log holds (what :func:`stored_message` checks against)."""
        return self._max_record_size

    def _pull_entries(self, topic: str, queue_id: int, entries: list[Entry],
                      max_bytes: int | None, resident: int, kept: KeptLookup | None
                      ) -> list[Any]:
        # Entries are in log order: the first one is the oldest record the pull reads.
        if resident and entries and entries[0][1] < self._log.next_offset - resident:
            raise NotInMemory(f"the pull reads records older than the log's last {resident} "
                              "bytes")
        return self._read_entries(topic, queue_id, entries, max_bytes, kept)

    def _read_entries(self, topic: str, queue_id: int, entries: list[Entry],
                      max_bytes: int | None, kept: KeptLookup | None = None) -> list[Any]:
        """The messages of the leading ``entries`` that fit ``max_bytes``."""
        out: list[Any] = []
        while entries and not out:  # again only when retention deleted all it read
            taken = _fitting(entries, max_bytes)
            self._decode_into(out, topic, queue_id, entries[:taken], kept)
            entries = entries[taken:]
        return out

    def _decode_into(self, out: list[Any], topic: str, queue_id: int,
                     entries: list[Entry], kept: KeptLookup | None) -> None:
        found = [None] * len(entries) if kept is None else [kept(e) for e in entries]
        missing = [(doff, dsize) for (_q, doff, dsize, _t, _s), hit
                   in zip(entries, found, strict=True) if hit is None]
        records = iter(read_records(self._log, missing) if missing else ())
        for entry, hit in zip(entries, found, strict=True):
            if hit is not None:
                out.append(Kept(hit[0], entry[0], hit[1]))
                continue
            data = next(records)
            if data is None:
                continue  # retention deleted its segment after we read the index
            try:
                message = stored_message(topic, queue_id, entry, data, self._max_record_size)
            except (BadRecord, IncompleteRecord) as exc:
                if out:  # return what precedes it; the next pull starts at the damage
                    break
                self.bad_records.met(exc, self._log.segment_for(entry[1]).name, topic,
                                     queue_id, entry[0])
                raise
            out.append(message)

    def _count_out(self, topic: str, messages: list[Any]) -> None:
        self.count_out(topic, len(messages), sum(
            m.body_size if isinstance(m, Kept) else len(m.body) for m in messages))

    def count_out(self, topic: str, messages: int, body_bytes: int) -> None:
        """Count ``messages`` of ``topic`` with ``body_bytes`` of bodies as read (the
        metrics), for a caller of :meth:`pull_stored`."""
        with self._out_lock:  # pulls run in several reader threads
            self.messages_out[topic] = self.messages_out.get(topic, 0) + messages
            self.bytes_out[topic] = self.bytes_out.get(topic, 0) + body_bytes

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, next offset) of a queue: what is consumable now (below the high
        watermark)."""
        self._check_open()
        check_topic(topic)
        check_queue_id(queue_id, self._queues.queue_count(topic))
        return self._range(topic, queue_id)

    def stored_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, next offset) of what this node stores of a queue, its followers'
        copies or not (Kafka's log end offset; :meth:`queue_range` is the consumable part)."""
        self._check_open()
        check_topic(topic)
        check_queue_id(queue_id, self._queues.queue_count(topic))
        return self._index.queue_range(topic, queue_id)

    def _range(self, topic: str, queue_id: int) -> tuple[int, int]:
        lo, hi = self._index.queue_range(topic, queue_id)
        return lo, self._visible_end(topic, queue_id, lo, hi)

    def _visible_end(self, topic: str, queue_id: int, lo: int, hi: int) -> int:
        """The next offset ``hi`` the index holds, bounded by the high watermark (read
        after the index: see :meth:`pull_answer`)."""
        limit = self._visibility.limit(topic, queue_id)
        if limit is not None and limit < hi:
            return max(lo, limit)
        return hi

    def messages_by_key(self, topic: str, key: str, limit: int = 100,
                        max_bytes: int | None = None) -> list[StoredMessage]:
        """Up to ``limit`` messages of ``topic`` with ``key``. ``max_bytes`` stops once the
        bodies, names and properties read add up to more (the first message always
        counts)."""
        self._check_open()
        check_topic(topic)
        check_label(key, "key", allow_none=False)
        out = []
        read = 0
        for qid, qoff in self._index.key_lookup(topic, key, limit):
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
        check_queue_id(queue_id, self._queues.queue_count(topic))
        check_offset(timestamp_ms, "timestamp_ms")
        found = self._index.offset_for_time(topic, queue_id, timestamp_ms)
        end = self.queue_range(topic, queue_id)[1]
        return end if found is None else min(found, end)

    def committed_offset(self, consumer_group: str, topic: str, queue_id: int) -> int | None:
        """The next offset ``consumer_group`` committed for the queue (None: never
        committed)."""
        self._check_open()
        check_name(consumer_group, "group", allow_none=False)
        check_topic(topic)
        check_queue_id(queue_id, self._queues.queue_count(topic))
        return self._index.committed_offset(consumer_group, topic, queue_id)

    def all_messages(self, topics: Iterable[str]) -> dict[tuple[str, int], list[StoredMessage]]:
        """Every consumable message of ``topics`` by queue (tools and tests)."""
        out = {}
        for topic in topics:
            for qid in range(self._queues.queue_count(topic)):
                lo, hi = self._index.queue_range(topic, qid)
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


def stored_message(topic: str, queue_id: int, entry: Entry, data: bytes | memoryview,
                   max_record_size: int) -> StoredMessage:
    """The message of index ``entry`` of a queue from its record's bytes ``data``, as a
    pull returns it (the dedup window's own properties left out). Raises BadRecord or
    IncompleteRecord for a damaged record."""
    qoff, doff, _dsize, _th, st = entry
    # decode_at: the record codec's C decoder where compiled (decode() is the codec's
    # Python, compiled as it is: about twice the instructions a pulled message).
    rec = decode_at(data, 0, doff, max_record_size, True)
    props = rec.properties
    if props and (PRODUCER_ID_PROPERTY in props
                  or PRINCIPAL_PROPERTY in props):  # the dedup window's own
        props = {k: v for k, v in props.items() if k not in HIDDEN_PROPERTIES}
    return StoredMessage(topic, queue_id, qoff, doff, rec.body, rec.key, rec.tags,
                         props if props else {}, st)


def _fitting(entries: list[Entry], max_bytes: int | None) -> int:
    """How many leading index entries fit ``max_bytes`` of records (at least one)."""
    if max_bytes is None:
        return len(entries)
    read = 0
    for i, (_qoff, _doff, dsize, _th, _st) in enumerate(entries):
        read += dsize
        if i and read > max_bytes:
            return i
    return len(entries)
