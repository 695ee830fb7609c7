"""Byte encodings of the index's keys and values.

Keys are built so that LMDB's byte order is the logical order: names end with a NUL
(names never contain one), integers are fixed-width big-endian. Values are little-endian.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from fmq.index.entries import QueueEntry, TimerEntry, TxEnd

QID = _QID = struct.Struct(">I")
QID_QOFF = _QID_QOFF = struct.Struct(">IQ")
QID_TIME_QOFF = _QID_TIME_QOFF = struct.Struct(">IQQ")
U64BE = _U64BE = struct.Struct(">Q")

#: consume-queue value: data offset, data size, tag hash, store time, source offset
CQ_VALUE = struct.Struct("<QIIqQ")
#: queue value: min offset, next offset
QUEUE_VALUE = struct.Struct("<qq")
#: key-index value: queue id, queue offset
KEY_VALUE = struct.Struct("<Iq")
#: transaction-end value: committed (1) or rolled back (0), log offset of the end record
TX_END_VALUE = struct.Struct("<Bq")
#: applied offset value (and a consumer offset written before offsets were in the log)
I64 = struct.Struct("<q")
#: consumer offset value: next offset to consume, log offset of its OFFSET record
CONSUMER_VALUE = struct.Struct("<qq")
#: pending-timer key: due time, TIMER record offset (so LMDB's order is firing order)
TIMER_KEY = struct.Struct(">QQ")
#: pending-timer value: size of the TIMER record, then its topic (UTF-8, to the end)
TIMER_VALUE = struct.Struct("<I")
#: ``timertopics`` (key: the topic, UTF-8) value: pending timers of the topic, i64
TIMER_COUNT = I64
#: The time index is sparse: a ``time`` item for each queue offset that is a multiple of
#: this (a power of two), not for every entry. A lookup by time seeks the first such item at
#: or after the time and scans at most this many ``cq`` entries before it, whose values hold
#: their store times (:meth:`fmq.index.store.IndexStore.offset_for_time`). Every message
#: then costs the index writer one LMDB put where it cost two.
TIME_EVERY = 32


def name(s: str) -> bytes:
    return s.encode() + b"\x00"


def queue_prefix(topic: str, queue_id: int) -> bytes:
    return name(topic) + _QID.pack(queue_id)


def cq_key(topic: str, queue_id: int, queue_offset: int) -> bytes:
    return name(topic) + _QID_QOFF.pack(queue_id, queue_offset)


def split_cq_key(key: bytes) -> tuple[str, int, int]:
    nul = key.index(0)
    qid, qoff = _QID_QOFF.unpack_from(key, nul + 1)
    return key[:nul].decode(), qid, qoff


def queue_key(topic: str, queue_id: int) -> bytes:
    return queue_prefix(topic, queue_id)


def split_queue_key(key: bytes) -> tuple[str, int]:
    nul = key.index(0)
    return key[:nul].decode(), _QID.unpack_from(key, nul + 1)[0]


def key_prefix(topic: str, key: str) -> bytes:
    return name(topic) + name(key)


def key_key(topic: str, key: str, source_offset: int) -> bytes:
    return key_prefix(topic, key) + _U64BE.pack(source_offset)


def offset_key(offset: int) -> bytes:
    return _U64BE.pack(offset)


def parse_offset_key(key: bytes) -> int:
    return _U64BE.unpack(key)[0]


def has_time_item(queue_offset: int) -> bool:
    """Whether the entry at ``queue_offset`` has a ``time`` item (:data:`TIME_EVERY`)."""
    return queue_offset % TIME_EVERY == 0


def time_key(topic: str, queue_id: int, store_time: int, queue_offset: int) -> bytes:
    return name(topic) + _QID_TIME_QOFF.pack(queue_id, max(store_time, 0), queue_offset)


def split_time_key(key: bytes) -> tuple[int, int]:
    """(store time, queue offset) of a time-index key."""
    nul = key.index(0)
    _qid, t, qoff = _QID_TIME_QOFF.unpack_from(key, nul + 1)
    return t, qoff


def consumer_key(group: str, topic: str, queue_id: int) -> bytes:
    return name(group) + name(topic) + _QID.pack(queue_id)


def split_consumer_key(key: bytes) -> tuple[str, str, int]:
    a = key.index(0)
    b = key.index(0, a + 1)
    return key[:a].decode(), key[a + 1 : b].decode(), _QID.unpack_from(key, b + 1)[0]


def consumer_value(value: bytes) -> tuple[int, int]:
    """(next offset, source offset) of a ``consumers`` value; the source is -1 for a value
    an index from before offsets were in the log holds (8 bytes, no source)."""
    if len(value) == I64.size:
        return I64.unpack(value)[0], -1
    return CONSUMER_VALUE.unpack(value)


# ---------------------------------------------------------------- items of an entry

#: The databases index items go to; items name them by position in this tuple.
ITEM_DBS = ("cq", "time", "keys", "keyoff", "txends", "txoff", "timers", "timeroff",
            "timertopics")
(DB_CQ, DB_TIME, DB_KEYS, DB_KEYOFF, DB_TXENDS, DB_TXOFF, DB_TIMERS, DB_TIMEROFF,
 DB_TIMERTOPICS) = range(len(ITEM_DBS))


def entry_items(e: QueueEntry) -> list[tuple[int, bytes, bytes]]:
    """(database, key, value) of everything a queue entry puts into the index: the one
    definition, used by the online index and the Spark rebuild. Queue marks and the applied
    offset are not items (they summarise many entries). A list, not a generator: recovery
    calls this once per message, and the generator's frames cost a fifth of its time.

    A ``time`` item only every :data:`TIME_EVERY` queue offsets, a ``keys`` and a ``keyoff``
    item only for a message with a key: what the reads need, one LMDB put per plain message."""
    topic, qid, qoff, data_offset, data_size, tag_hash, store_time, key, source = e
    name_ = topic.encode() + b"\x00"
    items = [(DB_CQ, name_ + _QID_QOFF.pack(qid, qoff),
              CQ_VALUE.pack(data_offset, data_size, tag_hash, store_time, source))]
    if qoff % TIME_EVERY == 0:
        items.append((DB_TIME, name_ + _QID_TIME_QOFF.pack(
            qid, store_time if store_time > 0 else 0, qoff), b""))
    if key:
        source_key = _U64BE.pack(source)
        kk = name_ + key.encode() + b"\x00" + source_key
        items.append((DB_KEYS, kk, KEY_VALUE.pack(qid, qoff)))
        items.append((DB_KEYOFF, source_key, kk))
    return items


def tx_end_key(tx_id: str, producer_group: str) -> bytes:
    """A ``txends`` key: the id first, so the groups that ended an id are one range."""
    return tx_id.encode() + b"\x00" + producer_group.encode()


def end_items(t: TxEnd, latest: bool = True) -> Iterator[tuple[int, bytes, bytes]]:
    """The items of a transaction end. Every end is in ``txoff``; ``txends`` holds one value
    per (id, group), the ``latest`` end in log order (the online index overwrites as it
    goes)."""
    tid = tx_end_key(t.tx_id, t.producer_group)
    if latest:
        yield DB_TXENDS, tid, TX_END_VALUE.pack(1 if t.committed else 0, t.offset)
    yield DB_TXOFF, U64BE.pack(t.offset), tid


def timer_key(due: int, offset: int) -> bytes:
    return TIMER_KEY.pack(max(due, 0), offset)


def split_timer_key(key: bytes) -> tuple[int, int]:
    """(due time, TIMER record offset) of a ``timers`` key."""
    return TIMER_KEY.unpack(key)


def timer_items(t: TimerEntry) -> Iterator[tuple[int, bytes, bytes]]:
    """The items of a pending timer: by due time (what the timer service reads) and by
    offset (what a firing MESSAGE and retention find it by), valued with the other key."""
    yield DB_TIMERS, timer_key(t.due, t.offset), TIMER_VALUE.pack(t.size) + t.topic.encode()
    yield DB_TIMEROFF, U64BE.pack(t.offset), timer_key(t.due, t.offset)
