"""Reads of the transaction ends (``txends``): how a transaction ended, by its producer
group and id, and which groups ended an id. The key is the id, NUL, the group
(:func:`fmq.index.keys.tx_end_key`), so one id's ends are one key range."""

from __future__ import annotations

import lmdb

from fmq.index import keys as K
from fmq.index.lmdb_env import Databases, ResizeGate


class TxEndReads:
    """Reads of ``txends`` (``IndexStore.tx_ends``); ``gate`` is the store's map resize
    gate, entered by every read."""

    def __init__(self, env: lmdb.Environment, db: Databases, gate: ResizeGate) -> None:
        self.env = env
        self.db = db
        self._gate = gate

    def get(self, producer_group: str, tx_id: str) -> tuple[bool, int] | None:
        """(committed?, log offset of the end record) of ``producer_group``'s finished
        transaction ``tx_id``, or None."""
        with self._gate, self.env.begin() as txn:
            v = txn.get(K.tx_end_key(tx_id, producer_group), db=self.db.txends)
        if v is None:
            return None
        committed, offset = K.TX_END_VALUE.unpack(v)
        return bool(committed), offset

    def groups(self, tx_id: str) -> list[str]:
        """The producer groups whose transaction ``tx_id`` ended (and is still indexed)."""
        prefix = K.tx_end_key(tx_id, "")
        found = []
        with self._gate, self.env.begin() as txn:
            cur = txn.cursor(db=self.db.txends)
            if cur.set_range(prefix):
                for key in cur.iternext(values=False):
                    if not key.startswith(prefix):
                        break
                    found.append(key[len(prefix):].decode())
        return found
