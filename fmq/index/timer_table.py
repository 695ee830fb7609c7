"""The pending timers in the index: adding a TIMER record's entry, removing it when a
MESSAGE fires it, dropping the entries of a log range (a cut tail, deleted segments), and
reading them (:class:`TimerReads`).

Each write function runs inside the caller's LMDB write transaction. ``timers`` is keyed by due
time then TIMER offset (firing order); ``timeroff`` by TIMER offset, valued with the
``timers`` key, so a firing MESSAGE (which names only the TIMER's offset) finds its entry;
``timertopics`` counts the pending timers of each destination topic (no entry at 0), so
statistics never walk the pending timers.
"""

from __future__ import annotations

from collections.abc import Iterable

import lmdb

from fmq.index import keys as K
from fmq.index.entries import TimerEntry, TimerFired
from fmq.index.lmdb_env import Databases, ResizeGate


def apply_timers(txn: lmdb.Transaction, db: Databases,
                 items: Iterable[TimerEntry | TimerFired]) -> None:
    """Apply timer items in log order. Idempotent: re-adding a pending timer overwrites it;
    firing one that is gone (already fired, or its segment deleted) changes nothing."""
    for item in items:
        if isinstance(item, TimerEntry):
            (_d, tkey, value), (_o, okey, _v) = K.timer_items(item)
            if txn.put(tkey, value, db=db.timers, overwrite=False):  # new, not a redo
                txn.put(okey, tkey, db=db.timeroff)
                _count(txn, db, item.topic.encode(), 1)
        else:
            _remove(txn, db, K.offset_key(item.timer_offset))


def _remove(txn: lmdb.Transaction, db: Databases, okey: bytes) -> None:
    """Remove the pending timer whose ``timeroff`` key is ``okey`` (absent: nothing)."""
    tkey = txn.get(okey, db=db.timeroff)
    if tkey is None:
        return
    value = txn.get(tkey, db=db.timers)
    txn.delete(tkey, db=db.timers)
    txn.delete(okey, db=db.timeroff)
    if value is not None:
        _count(txn, db, bytes(value[K.TIMER_VALUE.size:]), -1)


def _count(txn: lmdb.Transaction, db: Databases, topic: bytes, delta: int) -> None:
    old = txn.get(topic, db=db.timertopics)
    n = (K.TIMER_COUNT.unpack(old)[0] if old is not None else 0) + delta
    if n > 0:
        txn.put(topic, K.TIMER_COUNT.pack(n), db=db.timertopics)
    elif old is not None:
        txn.delete(topic, db=db.timertopics)


def drop_timers(txn: lmdb.Transaction, db: Databases, start: int, stop: int | None) -> int:
    """Delete the pending timers whose TIMER record lies at log offsets in [start, stop).
    Returns how many."""
    cur = txn.cursor(db=db.timeroff)
    doomed = []
    if cur.set_range(K.offset_key(start)):
        for k in cur.iternext(keys=True, values=False):
            if stop is not None and K.parse_offset_key(k) >= stop:
                break
            doomed.append(bytes(k))
    for k in doomed:
        _remove(txn, db, k)
    return len(doomed)


class TimerReads:
    """Reads of the pending timers (``IndexStore.timers``); ``gate`` is the store's map
    resize gate, entered by every read."""

    def __init__(self, env: lmdb.Environment, db: Databases, gate: ResizeGate) -> None:
        self.env = env
        self.db = db
        self._gate = gate

    def due(self, until_ms: int, limit: int) -> list[tuple[int, int, int]]:
        """Up to ``limit`` pending timers due at or before ``until_ms``, earliest first:
        (due time, TIMER offset, TIMER size)."""
        out = []
        with self._gate, self.env.begin() as txn:
            cur = txn.cursor(db=self.db.timers)
            if not cur.first():
                return out
            for k, v in cur:
                due, offset = K.split_timer_key(k)
                if due > until_ms or len(out) >= limit:
                    break
                out.append((due, offset, K.TIMER_VALUE.unpack_from(v)[0]))
        return out

    def stored_before(self, offset: int, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` pending timers whose TIMER lies before log offset ``offset``,
        oldest first: (TIMER offset, TIMER size)."""
        out = []
        with self._gate, self.env.begin() as txn:
            cur = txn.cursor(db=self.db.timeroff)
            if not cur.first():
                return out
            for k, tkey in cur:
                toff = K.parse_offset_key(k)
                if toff >= offset or len(out) >= limit:
                    break
                value = txn.get(tkey, db=self.db.timers)
                out.append((toff, K.TIMER_VALUE.unpack_from(value)[0]))
        return out

    def summary(self) -> dict[str, int | None]:
        """How many timers are pending, and the log offset of the oldest TIMER."""
        with self._gate, self.env.begin() as txn:
            count = txn.stat(self.db.timers)["entries"]
            cur = txn.cursor(db=self.db.timeroff)
            first = K.parse_offset_key(cur.key()) if cur.first() else None
        return {"pending": count, "oldest_offset": first}

    def pending_bytes(self) -> int:
        """Log bytes the pending timers' TIMER records take (one walk of ``timers``)."""
        size = K.TIMER_VALUE.unpack_from
        with self._gate, self.env.begin() as txn:
            return sum(size(v)[0] for v in
                       txn.cursor(db=self.db.timers).iternext(keys=False, values=True))

    def by_topic(self) -> dict[str, int]:
        """Pending timers per destination topic (topics with none are absent)."""
        with self._gate, self.env.begin() as txn:
            return {bytes(k).decode(): K.TIMER_COUNT.unpack(v)[0]
                    for k, v in txn.cursor(db=self.db.timertopics)}
