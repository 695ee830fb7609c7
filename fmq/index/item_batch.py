"""The index items of one transaction's queue entries, database by database, with the bounds
of every queue they touch: the work :meth:`IndexStore.apply
<fmq.index.store.IndexStore.apply>` does per message before LMDB writes anything (the
online index writers and recovery's redo run it for every message).

This module is the reference: each entry's items are exactly
:func:`fmq.index.keys.entry_items`, the one definition of them. ``fmq.index._item_batch_c``
(``_item_batch_c.pyx``, compiled by setup.py) builds the same bytes in C; for any entry it
cannot take as it is (a number outside the key's field, a value of another type) it hands
the whole batch to this module, so both return the same items or raise the same error.
:data:`fmq.index.store.ITEM_BATCH` is the one chosen.
"""

from __future__ import annotations

from fmq.index.entry_types import QueueEntry
from fmq.index.keys import DB_CQ, DB_KEYOFF, DB_KEYS, DB_TIME, entry_items

#: (cq, time, keys, keyoff) items, then each queue's [first queue offset, next queue offset].
ItemBatch = tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes]],
                  list[tuple[bytes, bytes]], list[tuple[bytes, bytes]],
                  dict[tuple[str, int], list[int]]]


def item_batch(entries: list[QueueEntry]) -> ItemBatch:
    """The ``cq``, ``time``, ``keys`` and ``keyoff`` items of ``entries`` in their order, and
    for each (topic, queue id) the lowest queue offset among them and one past the highest."""
    lists: dict[int, list[tuple[bytes, bytes]]] = {DB_CQ: [], DB_TIME: [], DB_KEYS: [],
                                                   DB_KEYOFF: []}
    bounds: dict[tuple[str, int], list[int]] = {}
    for e in entries:
        for db, k, v in entry_items(e):
            lists[db].append((k, v))
        q = (e[0], e[1])  # topic, queue id
        qoff = e[2]
        seen = bounds.get(q)
        if seen is None:
            bounds[q] = [qoff, qoff + 1]
        else:
            if qoff < seen[0]:
                seen[0] = qoff
            if qoff >= seen[1]:
                seen[1] = qoff + 1
    return lists[DB_CQ], lists[DB_TIME], lists[DB_KEYS], lists[DB_KEYOFF], bounds
