"""The pending timers in the index: adding a TIMER record's entry, removing it when a
MESSAGE fires it, and dropping the entries of a log range (a cut tail, deleted segments).

Each function runs inside the caller's LMDB write transaction. ``timers`` is keyed by due
time then TIMER offset (firing order); ``timeroff`` by TIMER offset, valued with the
``timers`` key, so a firing MESSAGE (which names only the TIMER's offset) finds its entry.
"""

from __future__ import annotations

from collections.abc import Iterable

import lmdb

from fmq.index import keys as K
from fmq.index.entries import TimerEntry, TimerFired
from fmq.index.lmdb_env import Databases


def apply_timers(txn: lmdb.Transaction, db: Databases,
                 items: Iterable[TimerEntry | TimerFired]) -> None:
    """Apply timer items in log order. Idempotent: re-adding a pending timer overwrites it;
    firing one that is gone (already fired, or its segment deleted) changes nothing."""
    for item in items:
        if isinstance(item, TimerEntry):
            for dbi, k, v in K.timer_items(item):
                txn.put(k, v, db=db.timers if dbi == K.DB_TIMERS else db.timeroff)
        else:
            okey = K.offset_key(item.timer_offset)
            tkey = txn.get(okey, db=db.timeroff)
            if tkey is not None:
                txn.delete(tkey, db=db.timers)
                txn.delete(okey, db=db.timeroff)


def drop_timers(txn: lmdb.Transaction, db: Databases, start: int, stop: int | None) -> int:
    """Delete the pending timers whose TIMER record lies at log offsets in [start, stop).
    Returns how many."""
    cur = txn.cursor(db=db.timeroff)
    doomed = []
    if cur.set_range(K.offset_key(start)):
        for k, tkey in cur:
            if stop is not None and K.parse_offset_key(k) >= stop:
                break
            doomed.append((k, tkey))
    for k, tkey in doomed:
        txn.delete(tkey, db=db.timers)
        txn.delete(k, db=db.timeroff)
    return len(doomed)
