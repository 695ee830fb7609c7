"""The topic table: each topic's configuration from its latest TOPIC record (key: the topic,
UTF-8; value: the configuration's JSON, ``fmq.topic_config``), and the queue floors a topic
delete or a topic's own retention raises.

Raising a queue's floor removes the queue's entries below it (consume queue, time and key
entries) and moves its minimum up: the messages stay in their segments until the broker's
retention deletes those, but nothing reads them any more, and later retention passes
(which start at a queue's minimum) have nothing of them left to find.

Each function runs inside the caller's LMDB write transaction.
"""

from __future__ import annotations

import json

import lmdb

from fmq.index import keys as K
from fmq.index.entries import TopicEntry
from fmq.index.lmdb_env import Databases


def apply_topics(txn: lmdb.Transaction, db: Databases, topics: list[TopicEntry]) -> None:
    """Store each topic's configuration (in log order: the latest wins) and raise the queue
    floors a delete carries. Called after the batch's queue entries are in, so a delete
    removes the messages stored before it in the same batch; those stored after it (the
    topic created again) have queue offsets at or above its floors and stay."""
    for t in topics:
        txn.put(t.topic.encode(), t.config.encode(), db=db.topics)
        floors = _floors(t.config)
        if floors:
            raise_topic_floors(txn, db, t.topic, floors)


def _floors(config: str) -> dict[int, int]:
    try:
        raw = json.loads(config).get("floors") or {}
        return {int(q): int(n) for q, n in raw.items()}
    except (ValueError, AttributeError, TypeError):
        return {}  # the engine refuses such a record before it is written; redo skips it


def raise_topic_floors(txn: lmdb.Transaction, db: Databases, topic: str,
                       floors: dict[int, int]) -> int:
    """Raise queue ``qid`` of ``topic`` to ``floors[qid]`` (removing its entries below);
    returns the entries removed. Entries below a floor at or under the queue's minimum are
    removed too: recovery's redo puts back the entries of every record it replays, the
    ones a floor had removed included, and replaying the floor removes them again."""
    removed = 0
    for qid, floor in floors.items():
        qkey = K.queue_key(topic, qid)
        v = txn.get(qkey, db=db.queues)
        if v is None and floor <= 0:
            continue  # a queue never written, and nothing to raise it to
        lo, hi = K.QUEUE_VALUE.unpack(v) if v else (floor, floor)
        cur = txn.cursor(db=db.cq)
        doomed = []
        if cur.set_range(K.cq_key(topic, qid, 0)):
            for k, val in cur:
                if not k.startswith(qkey):
                    break
                qoff = K.split_cq_key(k)[2]
                if qoff >= floor:
                    break
                _doff, _ds, _th, st, src = K.CQ_VALUE.unpack(val)
                doomed.append((k, K.time_key(topic, qid, st, qoff)
                               if K.has_time_item(qoff) else None, K.offset_key(src)))
        cur.close()
        for k, tk, ok in doomed:
            txn.delete(k, db=db.cq)
            if tk is not None:
                txn.delete(tk, db=db.time)
            kk = txn.get(ok, db=db.keyoff)
            if kk is not None and kk.startswith(topic.encode() + b"\x00"):
                txn.delete(kk, db=db.keys)
                txn.delete(ok, db=db.keyoff)
        removed += len(doomed)
        new = (max(lo, floor), max(hi, floor))
        if v is None or new != (lo, hi):
            txn.put(qkey, K.QUEUE_VALUE.pack(*new), db=db.queues)
    return removed


def read_topics(txn: lmdb.Transaction, db: Databases) -> dict[str, str]:
    """Every topic's configuration JSON, by topic."""
    return {bytes(k).decode(): bytes(v).decode() for k, v in txn.cursor(db=db.topics)}
