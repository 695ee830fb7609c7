"""Messages pulled lately, decoded, by log offset: consumers of several groups following
the same queue read the same records within milliseconds of each other, and each read cost
a ``pread``, a CRC and a decode in Python. The first pull decodes a record; the others
take it from here.

A record at a log offset never changes while the broker is open (the log is append-only;
only recovery and the offline repair cut it), so an entry is never stale. The cache is
bounded in bytes and forgets the oldest entries first: it helps readers near the tail and
costs the others one dictionary lookup per message.
"""

from __future__ import annotations

import threading

#: (body, key, tags, properties as items or None, record size).
Payload = tuple[bytes, str | None, str | None, tuple[tuple[str, str], ...] | None, int]


class RecentMessages:
    """Decoded payloads by the log offset of their record, at most ``max_bytes`` of
    records."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: dict[int, Payload] = {}
        self._bytes = 0
        self._lock = threading.Lock()  # pulls run in several reader threads

    def get(self, offset: int) -> Payload | None:
        return self._items.get(offset)  # one dict lookup: atomic, no lock needed

    def put(self, offset: int, payload: Payload) -> None:
        size = payload[4]
        if size > self.max_bytes:
            return
        with self._lock:
            if offset in self._items:
                return
            self._items[offset] = payload
            self._bytes += size
            items = self._items
            while self._bytes > self.max_bytes:
                self._bytes -= items.pop(next(iter(items)))[4]  # the oldest first

    def __len__(self) -> int:
        return len(self._items)
