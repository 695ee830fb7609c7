"""A batch's LMDB puts, database by database, in one write transaction: what
:meth:`IndexStore.apply <fmq.index.store.IndexStore.apply>` writes for the queue entries and
transaction ends of a batch (``cq``, ``time``, ``keys``, ``keyoff``, ``txends``, ``txoff``).

This module is the reference: one py-lmdb ``Cursor.putmulti`` per database (overwrite,
duplicates allowed, not in append mode). py-lmdb releases the interpreter lock around every
single put, so under load the index thread and the event loop trade the lock once per item.
``fmq.index._batch_puts_c`` (``_batch_puts_c.pyx``, compiled by setup.py) makes the same puts
through the LMDB engine py-lmdb itself calls, with the lock released once for the whole batch;
where it cannot (py-lmdb's layout not the one it knows, an item that is not a pair of
``bytes``) it hands the whole call to this module before writing anything, so both store the
same items and raise the same errors. :data:`fmq.index.store.PUT_BATCHES` is the one chosen.
"""

from __future__ import annotations

from collections.abc import Sequence

import lmdb

#: The items of one database: (its handle, its (key, value) pairs in the order to put them).
DbItems = tuple[object, list[tuple[bytes, bytes]]]


def put_batches(txn: lmdb.Transaction, batches: Sequence[DbItems]) -> list[tuple[int, int]]:
    """Put each database's items in ``txn`` (a write transaction), database after database,
    as ``Cursor.putmulti`` does; returns (items consumed, items added) per database, in
    ``batches``' order. An LMDB failure raises py-lmdb's error for it (``MapFullError``
    when the map is full) after the items before it were put: the caller aborts the
    transaction, as with ``putmulti``."""
    if not isinstance(txn, lmdb.Transaction):
        raise TypeError(f"put_batches needs an lmdb.Transaction, not {type(txn).__name__}")
    return [txn.cursor(db=db).putmulti(items) for db, items in batches]
