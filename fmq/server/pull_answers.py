"""The messages of PULL answers, encoded once each: consumers of several groups following
one queue pull the same messages within milliseconds of each other. The first pull encodes
a message (docs/protocol.md, ``stored_message``); the others copy its bytes. Their length is
the message's exact size in the answer, so fitting the reply budget needs no sizing pass.
"""

from __future__ import annotations

from fmq.engine.recent import RecentMessages
from fmq.message import StoredMessage
from fmq.protocol.schema import STORED_MESSAGE
from fmq.protocol.types import Encoded
from fmq.protocol.values import stored_to_wire

#: Bytes of encoded messages kept.
ENCODED_BYTES = 8 * 1024 * 1024


def encoded_cache() -> RecentMessages:
    """A cache of encoded messages for :func:`encode_fitting`."""
    return RecentMessages(ENCODED_BYTES)


def encode_fitting(cache: RecentMessages, msgs: list[StoredMessage], budget: int
                   ) -> tuple[Encoded, int, int]:
    """The leading messages of ``msgs`` whose encoded sizes add up to at most ``budget``
    (at least the first one, whatever its size), encoded: (the items, how many, bytes)."""
    parts: list[bytes] = []
    total = 0
    get = cache.get
    for m in msgs:
        # Everything the encoding holds beyond the record's own fields comes from the
        # queue entry: a key of them all is never stale.
        key = (m.offset, m.queue_id, m.queue_offset, m.store_time)
        data = get(key)
        if data is None:
            out = bytearray()
            STORED_MESSAGE.encode(out, stored_to_wire(m))
            data = bytes(out)
            cache.put(key, data, len(data))
        if parts and total + len(data) > budget:
            break
        parts.append(data)
        total += len(data)
    return Encoded(len(parts), b"".join(parts)), len(parts), total
