"""The recent tail of the queues consumers follow, in memory: each one's range and its last
index entries as the index's own writes left them, so that a pull at the tail reads no LMDB
transaction (issue 41 item 4, "the queue range from memory").

Only :meth:`IndexStore.apply <fmq.index.store.IndexStore.apply>` extends a tail, after its
transaction committed and before it returns (so before the dispatcher counts the batch
applied and wakes the pulls waiting on it); every other index write drops every tail (its
effect on a range, retention's raised minimum or a cut log's lowered end, is then read from
LMDB again). A tail therefore only ever holds what the index holds: flushed, indexed
records, never past a queue's next offset; the high watermark is applied by the reader
after the range, as for a range read from LMDB.

A tail is kept only for a queue that a read asked for (:meth:`QueueTails.follow`): writes
to queues nobody reads (sends without consumers) cost the index thread one dict lookup per
queue per batch, nothing per message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from fmq.log.record.queue_entry import QueueEntry

#: An index entry as reads return it: (queue offset, data offset, data size, tag hash,
#: store time).
Entry = tuple[int, int, int, int, int]

#: Entries a tail keeps at least; it is cut back to this many once it holds twice as many.
KEEP = 256
#: Queues followed at most; past it every tail is dropped and followers start again (many
#: queues read once each, not a few followed).
MAX_QUEUES = 4096


class Tail(NamedTuple):
    """One queue's tail: its range (``lo``, ``hi``) and its entries from queue offset
    ``start`` to ``hi``: ``entries[i]`` is queue offset ``start + i``. ``entries`` is only
    ever appended to past ``hi - start`` (by the next batch, which publishes a new Tail), so
    a reader holding this one reads a fixed snapshot."""

    lo: int
    hi: int
    start: int
    entries: list[Entry]


class QueueTails:
    """The tails (written by the index's writer under its write lock; read by any thread
    without a lock: a reader takes one :class:`Tail`, an immutable snapshot)."""

    def __init__(self) -> None:
        #: (topic, queue id) -> its Tail, or None while followed but not yet written to.
        self._tails: dict[tuple[str, int], Tail | None] = {}
        self._keep = True

    def stop_keeping(self) -> None:
        """Keep no tail: another process writes the index (``index_writer = "process"``),
        so a tail of this process's writes would fall behind what the index holds."""
        self._keep = False
        self._tails.clear()

    def read(self, topic: str, queue_id: int, start: int, limit: int,
             max_bytes: int | None = None) -> tuple[int, int, list[Entry]] | None:
        """What :meth:`IndexStore.queue_read <fmq.index.store.IndexStore.queue_read>` would
        return, when the tail holds it: ``start`` is within the tail (from its first entry
        up to its next offset), else None (read LMDB; the queue is followed from now on)."""
        tail = self._tails.get((topic, queue_id))
        if tail is None:
            if not self._keep:
                return None
            if len(self._tails) >= MAX_QUEUES:
                self._tails.clear()
            self._tails.setdefault((topic, queue_id), None)
            return None
        lo, hi, first, entries = tail
        if start < lo:
            start = lo
        if start < first or start > hi:
            return None
        end = min(hi, start + limit) if limit > 0 else start
        out = entries[start - first:end - first]
        if max_bytes is not None:  # as the read of LMDB: the first always, then what fits
            read = 0
            for i, e in enumerate(out):
                read += e[2]
                if read > max_bytes and i:
                    del out[i:]
                    break
        return lo, hi, out

    def get(self, topic: str, queue_id: int) -> Tail | None:
        """The queue's tail as the index's last write left it, or None (not followed, or
        not written to since it was, or dropped); follows nothing."""
        return self._tails.get((topic, queue_id))

    def extend(self, entries: Iterable[QueueEntry],
               ranges: dict[tuple[str, int], tuple[int, int]]) -> None:
        """A committed batch: ``entries`` (in log order) and each touched queue's range
        after it. A followed queue's tail takes them when they continue it exactly (one
        entry per offset from its next offset to the range's end), else starts again from
        the batch's entries (or is dropped, when they are not one per offset to the end)."""
        tails = self._tails
        if not tails:
            return
        new: dict[tuple[str, int], list[Entry]] = {q: [] for q in ranges if q in tails}
        if not new:
            return
        for e in entries:  # the index thread's cost per message: a lookup and a tuple
            got = new.get((e[0], e[1]))
            if got is not None:  # made once here, not by each reader of it
                got.append((e[2], e[3], e[4], e[5], e[6]))
        for q, got in new.items():
            lo, hi = ranges[q]
            first = got[0][0]
            if first + len(got) != hi or [e[0] for e in got] != list(range(first, hi)):
                tails[q] = None  # not one entry per offset up to the end: read LMDB
                continue
            tail = tails.get(q)  # a reader may have cleared the tails meanwhile
            if tail is not None and tail.hi == first and tail.lo == lo:
                kept = tail.entries
                if len(kept) + len(got) > 2 * KEEP:
                    cut = len(kept) + len(got) - KEEP
                    # New lists: readers of the old one keep theirs. A batch longer than
                    # KEEP cuts into its own entries too (cutting the old ones alone put
                    # the start past the first entry kept, by the difference).
                    kept = kept[cut:] + got if cut < len(kept) else got[cut - len(kept):]
                    start = tail.start + cut
                else:
                    start = tail.start
                    kept.extend(got)
                if start < lo:  # entries below the minimum are not the queue's any more
                    kept = kept[lo - start:]
                    start = lo
                tails[q] = Tail(lo, hi, start, kept)
            else:
                keep = got[-KEEP:]
                start = hi - len(keep)
                if start < lo:
                    keep = keep[lo - start:]
                    start = lo
                tails[q] = Tail(lo, hi, start, keep)

    def drop_all(self) -> None:
        """Another index write changed ranges in ways only LMDB knows (retention, a cut log,
        floors, a rebuild): forget every tail (the queues stay followed)."""
        tails = self._tails
        for q in list(tails):
            tails[q] = None
