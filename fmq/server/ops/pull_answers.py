"""The messages of PULL answers, encoded once each: consumers of several groups following
one queue pull the same messages within milliseconds of each other. The first pull reads,
decodes and encodes a message (docs/protocol.md, ``stored_message``); the others find its
bytes by its index entry (:func:`kept_lookup`, the read's ``kept``) and neither read nor
decode it again. Their length is the message's exact size in the answer, so fitting the
reply budget needs no sizing pass. This is the one cache of pulled messages.

Keeping messages costs a reader alone about 2 us a message (copies into memory that is not
in the CPU's cache), so only queues that several connections pull keep them
(:class:`SharedQueues`); the others only look.

The same cache holds whole answers: :func:`fmq.server.ops.pull_reads.pull_now` keeps a
shared queue's answer under (topic, queue, first offset), which the other groups' consumers,
woken by the same write, take with one lookup. Where the answers' messages are written in C
(``pull_messages.KEEPS_ENCODED`` false), messages are no longer kept one by one: that cost
more than writing them again.
"""

from __future__ import annotations

import struct
from typing import Any

from fmq.engine.reads import Kept, KeptLookup
from fmq.engine.recent import RecentMessages
from fmq.engine.tag_filter import Entry
from fmq.protocol.schema import STORED_MESSAGE
from fmq.protocol.types import NULL16, Encoded
from fmq.protocol.values import stored_to_wire

#: Bytes of encoded messages kept.
ENCODED_BYTES = 8 * 1024 * 1024


def encoded_cache() -> RecentMessages:
    """A cache of encoded messages for :func:`encode_fitting`: by (log offset, queue id,
    queue offset, store time), everything the encoding holds beyond the record's own
    fields, so a key is never stale; the value is (its bytes, the length of its body)."""
    return RecentMessages(ENCODED_BYTES)


def kept_lookup(cache: RecentMessages, queue_id: int) -> KeptLookup:
    """The read's ``kept`` for a pull of queue ``queue_id``: a message's encoded bytes by
    its index entry (queue offset, log offset, size, tag hash, store time)."""
    get = cache.get

    def kept(entry: Entry) -> tuple[bytes, int] | None:
        return get((entry[1], queue_id, entry[0], entry[4]))
    return kept


#: A queue counts as shared for this long after two connections pulled it this close.
SHARED_S = 5.0
CLOSE_S = 1.0


class SharedQueues:
    """Which queues several connections pull now (event-loop thread only)."""

    def __init__(self) -> None:
        #: (topic, queue id) -> (last session, when it pulled, shared until).
        self._last: dict[tuple[str, int], tuple[int, float, float]] = {}

    def note(self, topic: str, queue_id: int, session_id: int, now: float) -> bool:
        """A pull of ``session_id``: whether its queue is shared."""
        key = (topic, queue_id)
        last = self._last.get(key)
        until = 0.0
        if last is not None:
            until = last[2]
            if last[0] != session_id and now - last[1] < CLOSE_S:
                until = now + SHARED_S
        self._last[key] = (session_id, now, until)
        if len(self._last) > 100_000:  # many queues pulled once each: start over
            self._last.clear()
        return now < until


_U16 = struct.Struct(">H").pack
_IDS_BODY = struct.Struct(">IQQI").pack  # queue id, queue offset, log offset, body length
_I64 = struct.Struct(">q").pack
_NULL = _U16(NULL16)
_NO_PROPERTIES = _U16(0)


def encode_stored(m: Any) -> bytes:
    """``m`` (a StoredMessage) as STORED_MESSAGE encodes ``stored_to_wire(m)``: the same
    bytes, or the same ProtocolError. A pulled message (bytes body, text of the record's
    limits, no properties) is packed straight into its bytes: no field dict, no output
    buffer grown field by field, no copy of it at the end; anything else goes through the
    schema's codec (its own test compares the two)."""
    body, key, tags = m.body, m.key, m.tags
    if type(body) is bytes and not m.properties:
        topic = m.topic.encode() if type(m.topic) is str else None
        raw_key = key.encode() if type(key) is str else None
        raw_tags = tags.encode() if type(tags) is str else None
        if (topic is not None and len(topic) <= 0xFFFF
                and (raw_key is not None and len(raw_key) < NULL16 or key is None)
                and (raw_tags is not None and len(raw_tags) < NULL16 or tags is None)
                and len(body) <= 0xFFFF_FFFF
                and type(m.queue_id) is int and type(m.queue_offset) is int
                and type(m.offset) is int and type(m.store_time) is int):
            try:
                ids = _IDS_BODY(m.queue_id, m.queue_offset, m.offset, len(body))
                time = _I64(m.store_time)
            except struct.error:
                pass  # a number outside its field: the codec's error
            else:
                return b"".join((
                    _U16(len(topic)), topic, ids, body,
                    _NULL if raw_key is None else _U16(len(raw_key)), raw_key or b"",
                    _NULL if raw_tags is None else _U16(len(raw_tags)), raw_tags or b"",
                    _NO_PROPERTIES, time))
    out = bytearray()
    STORED_MESSAGE.encode(out, stored_to_wire(m))
    return bytes(out)


def encode_fitting(cache: RecentMessages, msgs: list[Any], budget: int,
                   keep: bool = True, looked: bool = False) -> tuple[Encoded, int, int]:
    """The leading messages of ``msgs`` (StoredMessage, or Kept: found encoded by the read)
    whose encoded sizes add up to at most ``budget`` (at least the first one, whatever its
    size), encoded: (the items, how many, bytes). ``keep``: keep what it encodes in
    ``cache`` for the next reader. ``looked``: the read looked every message up in
    ``cache`` (its ``kept``), so a StoredMessage was not there: encode it without a second
    look."""
    parts: list[bytes] = []
    total = 0
    get = cache.get
    for m in msgs:
        if type(m) is Kept:
            data = m.form
        else:
            key = (m.offset, m.queue_id, m.queue_offset, m.store_time)
            found = None if looked else get(key)
            if found is None:
                data = encode_stored(m)
                if keep:
                    cache.put(key, (data, len(m.body)), len(data))
            else:
                data = found[0]
        if parts and total + len(data) > budget:
            break
        parts.append(data)
        total += len(data)
    return Encoded(len(parts), b"".join(parts)), len(parts), total
