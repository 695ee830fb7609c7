"""The read side: pull from a queue, queue ranges, lookups by key and by time, consumer
group offsets. Everything read here is what the index made consumable."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from fmq.config import BrokerConfig
from fmq.engine.bad_records import BadRecords
from fmq.engine.log_reads import read_records
from fmq.engine.queues import Queues
from fmq.engine.recent import RecentMessages
from fmq.engine.visibility import Visibility
from fmq.errors import BadRecord, IncompleteRecord
from fmq.index.store import IndexStore
from fmq.log.log import Log
from fmq.log.record import decode
from fmq.message import (
    HIDDEN_PROPERTIES,
    PRINCIPAL_PROPERTY,
    PRODUCER_ID_PROPERTY,
    StoredMessage,
    check_count,
    check_label,
    check_name,
    check_offset,
    check_queue_id,
    check_topic,
)

#: Bytes of records :attr:`Reader.recent` keeps decoded.
RECENT_BYTES = 8 * 1024 * 1024


class NotInMemory(Exception):
    """A pull limited to the log's last bytes (``resident``) would read older records, which
    may need the disk: its caller reads them where a disk wait blocks nobody else."""


class Reader:
    """Reads of one broker; ``check_open()`` raises once the broker is closed."""

    def __init__(self, log_: Log, index: IndexStore, config: BrokerConfig, queues: Queues,
                 max_record_size: int, check_open: Callable[[], None],
                 visibility: Visibility) -> None:
        self.log = log_
        #: The high watermark: no read returns a message past it.
        self.visibility = visibility
        self.index = index
        self.config = config
        self.queues = queues
        self.max_record_size = max_record_size
        self.check_open = check_open
        self.bad_records = BadRecords()
        #: Messages and body bytes returned per topic since the broker opened (metrics).
        self.messages_out: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        self._out_lock = threading.Lock()
        #: Decoded records lately pulled: consumers following one queue share the decode.
        self.recent = RecentMessages(RECENT_BYTES)

    def pull(self, topic: str, queue_id: int, offset: int, max_messages: int = 32,
             max_bytes: int | None = None, keep: bool = False, resident: int = 0
             ) -> list[StoredMessage]:
        """See :meth:`fmq.engine.broker.Broker.pull`."""
        self.check_open()
        check_topic(topic)
        check_queue_id(queue_id, self.queues.queue_count(topic))
        check_offset(offset)
        check_count(max_messages, "max_messages")
        lo, _hi = self.index.queue_range(topic, queue_id)
        start = max(offset, lo)
        limit = self.visibility.limit(topic, queue_id)
        if limit is not None:
            if start >= limit:
                return []
            max_messages = min(max_messages, limit - start)
        entries = self.index.queue_entries(topic, queue_id, start, max_messages)
        # Entries are in log order: the first one is the oldest record the pull reads.
        if resident and entries and entries[0][1] < self.log.next_offset - resident:
            raise NotInMemory(f"the pull reads records older than the log's last {resident} "
                              "bytes")
        out: list[StoredMessage] = []
        while entries and not out:  # again only when retention deleted all it read
            taken = _fitting(entries, max_bytes)
            self._decode_into(out, topic, queue_id, entries[:taken], keep)
            del entries[:taken]
        if out:
            self._count_out(topic, out)
        return out

    def _decode_into(self, out: list[StoredMessage], topic: str, queue_id: int,
                     entries: list[tuple[int, int, int, int, int]], keep: bool) -> None:
        recent = self.recent
        cached = [recent.get(doff) for _q, doff, _d, _t, _s in entries]
        missing = [(doff, dsize) for (_q, doff, dsize, _t, _s), payload
                   in zip(entries, cached, strict=True) if payload is None]
        records = iter(read_records(self.log, missing))
        for (qoff, doff, _dsize, _th, st), payload in zip(entries, cached, strict=True):
            if payload is None:
                data = next(records)
                if data is None:
                    continue  # retention deleted its segment after we read the index
                try:
                    rec = decode(data, 0, base_offset=doff,
                                 max_record_size=self.max_record_size)
                except (BadRecord, IncompleteRecord) as exc:
                    if out:  # return what precedes it; the next pull starts at the damage
                        break
                    self.bad_records.met(exc, self.log.segment_for(doff).name, topic,
                                         queue_id, qoff)
                    raise
                props = rec.properties
                if props and (PRODUCER_ID_PROPERTY in props
                              or PRINCIPAL_PROPERTY in props):  # the dedup window's own
                    props = {k: v for k, v in props.items() if k not in HIDDEN_PROPERTIES}
                payload = (rec.body, rec.key, rec.tags, tuple(props.items()) if props else None)
                if keep:  # a reader alone would pay for keeping it and never use it
                    recent.put(doff, payload, rec.size)
            body, key, tags, items = payload
            # Every message gets a dict of its own: a caller may change it.
            out.append(StoredMessage(topic, queue_id, qoff, doff, body, key, tags,
                                     dict(items) if items else {}, st))

    def _count_out(self, topic: str, messages: list[StoredMessage]) -> None:
        with self._out_lock:  # pulls run in several reader threads
            self.messages_out[topic] = self.messages_out.get(topic, 0) + len(messages)
            self.bytes_out[topic] = (self.bytes_out.get(topic, 0)
                                     + sum(len(m.body) for m in messages))

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, next offset) of a queue: what is consumable now (below the high
        watermark)."""
        self.check_open()
        check_topic(topic)
        check_queue_id(queue_id, self.queues.queue_count(topic))
        lo, hi = self.index.queue_range(topic, queue_id)
        limit = self.visibility.limit(topic, queue_id)
        if limit is not None and limit < hi:
            hi = max(lo, limit)
        return lo, hi

    def messages_by_key(self, topic: str, key: str, limit: int = 100,
                        max_bytes: int | None = None) -> list[StoredMessage]:
        """See :meth:`fmq.engine.broker.Broker.messages_by_key`."""
        self.check_open()
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
        self.check_open()
        check_topic(topic)
        check_queue_id(queue_id, self.queues.queue_count(topic))
        check_offset(timestamp_ms, "timestamp_ms")
        found = self.index.offset_for_time(topic, queue_id, timestamp_ms)
        end = self.queue_range(topic, queue_id)[1]
        return end if found is None else min(found, end)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The next offset ``group`` committed for the queue (None: never committed)."""
        self.check_open()
        check_name(group, "group", allow_none=False)
        check_topic(topic)
        check_queue_id(queue_id, self.queues.queue_count(topic))
        return self.index.committed_offset(group, topic, queue_id)

    def all_messages(self, topics: Iterable[str]) -> dict[tuple[str, int], list[StoredMessage]]:
        """Every consumable message of ``topics`` by queue (tools and tests)."""
        out = {}
        for topic in topics:
            for qid in range(self.queues.queue_count(topic)):
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


def _fitting(entries: list[tuple[int, int, int, int, int]], max_bytes: int | None) -> int:
    """How many leading index entries fit ``max_bytes`` of records (at least one)."""
    if max_bytes is None:
        return len(entries)
    read = 0
    for i, (_qoff, _doff, dsize, _th, _st) in enumerate(entries):
        read += dsize
        if i and read > max_bytes:
            return i
    return len(entries)
