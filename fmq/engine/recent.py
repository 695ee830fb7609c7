"""Messages pulled lately, by their index entry: consumers of several groups following the
same queue read the same records within milliseconds of each other, and each read cost a
``pread``, a CRC, a decode and an encode in Python. The first pull does that work; the
others take its result from here (the server keeps PULL answers' encoded messages,
``fmq/server/pull_answers.py``: the one cache of pulled messages).

A record at a log offset never changes while the broker is open (the log is append-only;
only recovery and the offline repair cut it), so an entry is never stale. The cache is
bounded in bytes and forgets the oldest entries first: it helps readers near the tail and
costs the others one dictionary lookup per message.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

#: Bytes an entry costs beyond its ``size`` (the key, the tuples and strings, the dict's
#: slot): small messages must not let the cache hold far more memory than its bound.
ENTRY_OVERHEAD = 256


class RecentMessages:
    """Values by key (naming their record's log offset), at most ``max_bytes`` of them as
    their ``size`` counts them."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        # Ordered: taking the oldest entry is O(1) (a plain dict's first key, after many
        # deletions at its front, is found by skipping their slots one by one).
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # pulls run in several reader threads

    def get(self, key: Hashable) -> Any:
        """The value kept for ``key``, or None."""
        found = self._items.get(key)  # one dict lookup: atomic, no lock needed
        return None if found is None else found[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        size += ENTRY_OVERHEAD
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._bytes -= self._items.popitem(last=False)[1][1]  # the oldest first

    def __len__(self) -> int:
        return len(self._items)
