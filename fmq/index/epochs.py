"""The epoch history: which primary's term (epoch) starts at which log offset.

Derived from the log's EPOCH records like every other part of the index (the dispatcher,
recovery's redo and a rebuild fill it), so deleting the index loses nothing. It lives in
the ``meta`` database under ``epoch/`` + the epoch (u64, big-endian, so LMDB's order is
epoch order); the value is the EPOCH record's log offset (i64) then the node name (UTF-8).
A log with no EPOCH record is in epoch 0 from its start.

:func:`epoch_end` answers Kafka's OffsetsForLeaderEpoch question (KIP-101): where does a
given epoch end in this log? A node that starts following compares it with its own log to
find where the two diverged (docs/replication.md, *Epochs and truncation*).
"""

from __future__ import annotations

import struct

import lmdb

from fmq.index.entries import EpochEntry
from fmq.index.lmdb_env import Databases

_PREFIX = b"epoch/"
_EPOCH = struct.Struct(">Q")
_START = struct.Struct("<q")


def _key(epoch: int) -> bytes:
    return _PREFIX + _EPOCH.pack(epoch)


def put_epoch(txn: lmdb.Transaction, db: Databases, entry: EpochEntry) -> None:
    """Record a term (inside the caller's write transaction)."""
    txn.put(_key(entry.epoch), _START.pack(entry.start) + entry.node.encode(), db=db.meta)


def drop_epochs_from(txn: lmdb.Transaction, db: Databases, log_end: int) -> int:
    """Forget the terms whose EPOCH record lies at or after ``log_end`` (a cut log)."""
    doomed = [k for k, v in read_raw(txn, db) if _START.unpack_from(v)[0] >= log_end]
    for k in doomed:
        txn.delete(k, db=db.meta)
    return len(doomed)


def read_raw(txn: lmdb.Transaction, db: Databases) -> list[tuple[bytes, bytes]]:
    cur = txn.cursor(db=db.meta)
    out = []
    if cur.set_range(_PREFIX):
        for k, v in cur:
            if not k.startswith(_PREFIX):
                break
            out.append((bytes(k), bytes(v)))
    return out


def read_history(txn: lmdb.Transaction, db: Databases) -> list[EpochEntry]:
    """Every recorded term, oldest first."""
    return [EpochEntry(_EPOCH.unpack_from(k, len(_PREFIX))[0], _START.unpack_from(v)[0],
                       v[_START.size:].decode()) for k, v in read_raw(txn, db)]


def last_epoch(history: list[EpochEntry]) -> int:
    """The epoch of the newest term in ``history`` (0: no EPOCH record)."""
    return history[-1].epoch if history else 0


def epoch_end(history: list[EpochEntry], epoch: int, log_end: int) -> tuple[int, int]:
    """(the largest epoch of ``history`` at or below ``epoch``, the log offset where that
    epoch ends): the start of the next term, or ``log_end`` for the newest one. Epoch 0
    (before any EPOCH record) ends where the first term starts."""
    found = 0
    end = history[0].start if history else log_end
    for i, entry in enumerate(history):
        if entry.epoch > epoch:
            break
        found = entry.epoch
        end = history[i + 1].start if i + 1 < len(history) else log_end
    return found, end
