"""The messages of PULL answers, encoded once each: consumers of several groups following
one queue pull the same messages within milliseconds of each other. The first pull encodes
a message (docs/protocol.md, ``stored_message``); the others copy its bytes. Their length is
the message's exact size in the answer, so fitting the reply budget needs no sizing pass.

Keeping messages costs a reader alone about 2 us a message (copies into memory that is not
in the CPU's cache), so only queues that several connections pull keep them
(:class:`SharedQueues`); the others only look.
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


def encode_fitting(cache: RecentMessages, msgs: list[StoredMessage], budget: int,
                   keep: bool = True) -> tuple[Encoded, int, int]:
    """The leading messages of ``msgs`` whose encoded sizes add up to at most ``budget``
    (at least the first one, whatever its size), encoded: (the items, how many, bytes).
    ``keep``: keep what it encodes in ``cache`` for the next reader."""
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
            if keep:
                cache.put(key, data, len(data))
        if parts and total + len(data) > budget:
            break
        parts.append(data)
        total += len(data)
    return Encoded(len(parts), b"".join(parts)), len(parts), total
