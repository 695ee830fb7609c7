"""The topics' figures the console shows (messages, bytes, store times), kept between page
loads instead of recounted by each.

A queue's message count and store times are a few index reads; its bytes are not kept by
the index (``IndexStore.queue_bytes`` walks every entry, which under load took most of the
send rate when pages were fetched back to back: docs/performance.md, *The console*). So the
console counts each queue's bytes by chunks of :data:`CHUNK` queue offsets and keeps the
sums: a refresh counts only what changed since (the chunk that grew at the end, the chunk
cut at the start by retention), each chunk in a read of its own in the server's reader
threads, and at most :data:`WALK_BUDGET` entries per refresh. Until every chunk of a queue
has been counted once, its bytes are estimated from the counted ones (the mean size of a
counted entry) and the page marks them as estimates. Refreshes happen at most once per
``console_sample_ms``; pages in between share the last figures.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

#: Queue offsets per counted chunk (one read in a reader thread walks at most this many).
CHUNK = 4096
#: Index entries walked per refresh at most, over every queue (the rest: next refresh).
WALK_BUDGET = 64 * CHUNK


@dataclass
class CountedChunk:
    """Bytes of the entries at queue offsets ``start`` up to (not incl.) ``end``."""

    start: int
    end: int
    bytes: int


@dataclass
class QueueBytes:
    """One queue's counted chunks, by chunk number (queue offset // CHUNK)."""

    chunks: dict[int, CountedChunk] = field(default_factory=dict)

    def wanted(self, lo: int, hi: int) -> list[tuple[int, int, int, bool]]:
        """(chunk, start, end, extends) to count so every chunk of [lo, hi) is counted,
        newest first (``extends``: the entries add to the chunk's counted ones); drops the
        chunks retention deleted."""
        for n in [n for n in self.chunks if (n + 1) * CHUNK <= lo or n * CHUNK >= hi]:
            del self.chunks[n]
        out = []
        for n in range(max(0, (hi - 1) // CHUNK), lo // CHUNK - 1, -1):
            start, end = max(lo, n * CHUNK), min(hi, (n + 1) * CHUNK)
            have = self.chunks.get(n)
            if have is None or have.start != start or have.end > end:
                out.append((n, start, end, False))  # not counted, cut at the start, or cut
            elif have.end < end:  # grew at the end: count only the new entries
                out.append((n, have.end, end, True))
        return out

    def add(self, n: int, start: int, end: int, extends: bool, counted: int) -> None:
        have = self.chunks.get(n)
        if extends and have is not None and have.end == start:
            have.end, have.bytes = end, have.bytes + counted
        else:
            self.chunks[n] = CountedChunk(start, end, counted)

    def figures(self, lo: int, hi: int) -> tuple[int, bool]:
        """(bytes, exact): counted bytes plus an estimate for the entries not counted."""
        entries = counted = 0
        for chunk in self.chunks.values():
            entries += chunk.end - chunk.start
            counted += chunk.bytes
        missing = max(0, (hi - lo) - entries)
        if not missing:
            return counted, True
        mean = counted / entries if entries else 0
        return counted + round(missing * mean), False


@dataclass
class TopicFigures:
    """Per topic: messages, bytes (``exact`` false: partly estimated), store times."""

    at: float
    topics: dict[str, dict]


class TopicSizes:
    """The topics' figures for the console's pages (the console's loop only)."""

    def __init__(self, inventory: Callable[[], Any], read: Callable[..., Awaitable[Any]],
                 every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        #: The open broker's inventory (another one after a role change) and how to run a
        #: blocking read of it (the server's reader threads).
        self.inventory = inventory
        self.read = read
        self.every_s = every_s
        self.clock = clock
        self.queues: dict[tuple[str, int], QueueBytes] = {}
        self.last: TopicFigures | None = None
        self._refreshing: asyncio.Task | None = None
        self._inventory: Any = None
        #: Entries one refresh walks at most.
        self.budget = WALK_BUDGET
        #: Entries walked by the refreshes so far (docs, tests: what a refresh costs).
        self.walked = 0

    async def current(self) -> TopicFigures:
        """The figures of at most ``every_s`` ago (refreshed now if older; callers
        arriving meanwhile wait for the same refresh)."""
        if self.last is not None and self.clock() - self.last.at < self.every_s:
            return self.last
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh())
        return await asyncio.shield(self._refreshing)

    async def _refresh(self) -> TopicFigures:
        inventory = self.inventory()
        if inventory is not self._inventory:  # another broker (a role change): count anew
            self.queues.clear()
            self._inventory = inventory
        shapes = await self.read(inventory.queue_shapes)
        for gone in self.queues.keys() - shapes.keys():
            del self.queues[gone]
        budget = self.budget
        for (topic, qid), (lo, hi, _first, _last) in shapes.items():
            counted = self.queues.setdefault((topic, qid), QueueBytes())
            for n, start, end, extends in counted.wanted(lo, hi):
                if budget <= 0:
                    break
                size = await self.read(inventory.queue_bytes, topic, qid, start, end)
                counted.add(n, start, end, extends, size)
                budget -= end - start
                self.walked += end - start
        topics: dict[str, dict] = {}
        for (topic, qid), (lo, hi, first, last) in sorted(shapes.items()):
            row = topics.setdefault(topic, {"topic": topic, "messages": 0, "bytes": 0,
                                            "exact": True, "first_store_time": None,
                                            "last_store_time": None})
            if hi <= lo:
                continue
            size, exact = self.queues[topic, qid].figures(lo, hi)
            row["messages"] += hi - lo
            row["bytes"] += size
            row["exact"] = row["exact"] and exact
            if first is not None and (row["first_store_time"] is None
                                      or first < row["first_store_time"]):
                row["first_store_time"] = first
            if last is not None and (row["last_store_time"] is None
                                     or last > row["last_store_time"]):
                row["last_store_time"] = last
        self.last = TopicFigures(self.clock(), topics)
        return self.last
