"""Removing index entries by log range: the part of the index past a cut log, the part
before segments that retention deleted, and queue minimums raised to the queue-floors file.

Each function runs inside the caller's LMDB write transaction.
"""

from __future__ import annotations

import lmdb

from fmq.index import keys as K
from fmq.index.epochs import drop_epochs_from
from fmq.index.lmdb_env import APPLIED, Databases
from fmq.index.timer_table import drop_timers


def remove_from(txn: lmdb.Transaction, db: Databases, log_end: int) -> int:
    """Delete every entry whose source record lies at or after ``log_end`` (consumer
    offsets included) and cap the applied offset. Returns entries removed."""
    removed = 0
    for qkey, qval in list(txn.cursor(db=db.queues)):
        topic, qid = K.split_queue_key(qkey)
        lo, hi = K.QUEUE_VALUE.unpack(qval)
        new_hi = hi
        cur = txn.cursor(db=db.cq)
        while new_hi > lo:
            k = K.cq_key(topic, qid, new_hi - 1)
            v = txn.get(k, db=db.cq)
            if v is None:
                new_hi -= 1
                continue
            doff, _ds, _th, st, src = K.CQ_VALUE.unpack(v)
            if src < log_end:
                break
            txn.delete(k, db=db.cq)
            if K.has_time_item(new_hi - 1):
                txn.delete(K.time_key(topic, qid, st, new_hi - 1), db=db.time)
            removed += 1
            new_hi -= 1
        cur.close()
        if new_hi != hi:
            txn.put(qkey, K.QUEUE_VALUE.pack(lo, new_hi), db=db.queues)
    cur = txn.cursor(db=db.keyoff)
    if cur.set_range(K.offset_key(log_end)):
        doomed = list(cur)
        for k, kk in doomed:
            txn.delete(kk, db=db.keys)
            txn.delete(k, db=db.keyoff)
    _drop_tx_ends(txn, db, log_end, None)
    # An offset commit the cut removed is gone from the log: the group's offset is the
    # earlier one, which only a rebuild can find again, so it restarts per its policy.
    for k, v in list(txn.cursor(db=db.consumers)):
        if K.consumer_value(v)[1] >= log_end:
            txn.delete(k, db=db.consumers)
            removed += 1
    drop_timers(txn, db, log_end, None)
    removed += drop_epochs_from(txn, db, log_end)
    v = txn.get(APPLIED, db=db.meta)
    if v is not None and K.I64.unpack(v)[0] > log_end:
        txn.put(APPLIED, K.I64.pack(log_end), db=db.meta)
    return removed

def remove_before(txn: lmdb.Transaction, db: Databases, log_start: int) -> int:
    """Delete entries whose data lies before ``log_start`` and advance each queue's
    minimum offset. Returns entries removed."""
    removed = 0
    for qkey, qval in list(txn.cursor(db=db.queues)):
        topic, qid = K.split_queue_key(qkey)
        lo, hi = K.QUEUE_VALUE.unpack(qval)
        new_lo = hi  # unless an entry at or after log_start remains
        doomed_entries = []
        cur = txn.cursor(db=db.cq)
        # Seek, don't count: after a rebuild the stored minimum is 0 while the first
        # remaining entry may be millions of offsets further.
        if cur.set_range(K.cq_key(topic, qid, lo)):
            for k, v in cur:
                if not k.startswith(qkey):
                    break
                doff, _ds, _th, st, _src = K.CQ_VALUE.unpack(v)
                qoff = K.split_cq_key(k)[2]
                if doff >= log_start:
                    new_lo = qoff
                    break
                doomed_entries.append((k, K.time_key(topic, qid, st, qoff)
                                       if K.has_time_item(qoff) else None))
        for k, tk in doomed_entries:
            txn.delete(k, db=db.cq)
            if tk is not None:
                txn.delete(tk, db=db.time)
        removed += len(doomed_entries)
        new_lo = max(new_lo, lo)
        if new_lo != lo:
            txn.put(qkey, K.QUEUE_VALUE.pack(new_lo, hi), db=db.queues)
    cur = txn.cursor(db=db.keyoff)
    doomed = []
    if cur.first():
        for k, kk in cur:
            if K.parse_offset_key(k) >= log_start:
                break
            doomed.append((k, kk))
    for k, kk in doomed:
        txn.delete(kk, db=db.keys)
        txn.delete(k, db=db.keyoff)
    _drop_tx_ends(txn, db, 0, log_start)
    drop_timers(txn, db, 0, log_start)
    return removed

def _drop_tx_ends(txn: lmdb.Transaction, db: Databases, start: int, stop: int | None
                  ) -> None:
    """Delete transaction ends recorded at log offsets in [start, stop)."""
    cur = txn.cursor(db=db.txoff)
    doomed = []
    if cur.set_range(K.offset_key(start)):
        for k, tid in cur:
            if stop is not None and K.parse_offset_key(k) >= stop:
                break
            doomed.append((k, tid))
    for k, tid in doomed:
        v = txn.get(tid, db=db.txends)
        if v is not None and K.TX_END_VALUE.unpack(v)[1] == K.parse_offset_key(k):
            txn.delete(tid, db=db.txends)
        txn.delete(k, db=db.txoff)

def raise_to_floors(txn: lmdb.Transaction, db: Databases, floors: dict[tuple[str, int], int]
                    ) -> int:
    """Raise each queue's offsets to its floor; returns how many queues changed."""
    changed = 0
    for (topic, qid), floor in floors.items():
        k = K.queue_key(topic, qid)
        v = txn.get(k, db=db.queues)
        lo, hi = K.QUEUE_VALUE.unpack(v) if v else (floor, floor)
        top = max(hi, floor)
        # An empty queue moves up to its floor; one with entries keeps its minimum.
        new = (top, top) if lo >= hi else (lo, top)
        if v is None or new != (lo, hi):
            txn.put(k, K.QUEUE_VALUE.pack(*new), db=db.queues)
            changed += 1
    return changed
