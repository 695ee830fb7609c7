"""Loading the sorted index items into a fresh LMDB index on the driver, through
:meth:`IndexStore.append_sorted` (the store's own map-growth rule), with the queue marks
read off the items on the way, the queue floors retention recorded, the applied offset
and the consumer offsets: the latest OFFSET record of each queue, or the old index's when
that index is from before offsets were log records (the broker's next open writes those to
the log)."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

import pyarrow.parquet as pq

from fmq.datadir import QUEUE_FLOORS_FILE, index_exists
from fmq.errors import IndexCorrupt
from fmq.index import keys as K
from fmq.index.store import IndexStore
from fmq.recovery.floors import read_floors
from fmq.spark.errors import RebuildConflict

_WRITE_CHUNK = 50_000

Queue = tuple[str, int]


@dataclass(frozen=True)
class LoadedIndex:
    """What the load wrote: item counts per database, the queue marks, how many queues
    were carried over from the old index, floors applied, consumer offsets written and
    whether they came from the log (else from an old index that predates that)."""

    counts: dict[str, int]
    queues: dict[Queue, tuple[int, int]]
    carried: int
    floors_applied: int
    consumers: int
    consumers_from_log: bool


def put_sorted(store: IndexStore, db_name: str, items: list[tuple[bytes, bytes]]) -> None:
    """Append ``items`` (sorted, unique keys) into ``db_name`` in one transaction and fail
    loudly if LMDB's append mode skipped any."""
    added = store.append_sorted(db_name, items)
    if added != len(items):
        raise RebuildConflict(
            f"LMDB append mode took {added} of {len(items)} keys in database {db_name}: a key "
            f"was out of order or repeated (first key of the batch {items[0][0]!r}). The log "
            f"holds two records for one index key; run `fmq log verify` and report it")


def part_files(directory: str) -> list[str]:
    """The Parquet part files of a sorted table, in key order."""
    # Spark names output files part-NNNNN-...; after a global sort partition N holds the
    # N-th key range, so name order is key order.
    return sorted(glob.glob(os.path.join(directory, "part-*.parquet")))


def write_items(store: IndexStore, files: list[str]
                ) -> tuple[dict[str, int], dict[bytes, tuple[int, int]]]:
    """Stream the sorted item files into the LMDB databases in key order. Returns the
    item counts and, read off the sorted consume-queue keys on the way, each queue's
    (first queue offset in the log, last + 1) by queue key."""
    counts = dict.fromkeys(K.ITEM_DBS, 0)
    marks: dict[bytes, tuple[int, int]] = {}
    current = -1
    pending: list[tuple[bytes, bytes]] = []

    def flush() -> None:
        if pending:
            put_sorted(store, K.ITEM_DBS[current], pending)
            counts[K.ITEM_DBS[current]] += len(pending)
            pending.clear()

    for path in files:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=_WRITE_CHUNK):
            dbs = batch.column("db").to_pylist()
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            for db, k, v in zip(dbs, keys, values, strict=True):
                if db != current:
                    if db < current:
                        raise RebuildConflict("Spark returned the index items out of order; "
                                              "rerun the job (a partial output was left?)")
                    flush()
                    current = db
                if db == K.DB_CQ:
                    # cq key = queue key + queue offset (u64 big-endian): sorted keys give
                    # each queue's offsets in ascending order.
                    qkey, qoff = k[:-8], int.from_bytes(k[-8:], "big")
                    lo_hi = marks.get(qkey)
                    marks[qkey] = (qoff if lo_hi is None else lo_hi[0], qoff + 1)
                pending.append((k, v))
                if len(pending) >= _WRITE_CHUNK:
                    flush()
    flush()
    return counts, marks


def read_old_index(path: str) -> tuple[dict, dict]:
    """The consumer offsets only the old index knows (it predates offsets in the log) and
    its queue marks, if it can be read."""
    if not index_exists(path):
        return {}, {}
    try:
        old = IndexStore(path)
    except IndexCorrupt:
        return {}, {}
    try:
        legacy = {} if old.offsets_in_log() else old.consumer_offsets()
        return legacy, old.all_queues()
    except Exception:  # noqa: BLE001 - a damaged index: nothing to carry over
        return {}, {}
    finally:
        old.close()


def load_index(index_dir: str, items_dir: str, old_index_dir: str, data_dir: str,
               log_end: int, offsets: dict[tuple[str, str, int], tuple[int, int]]
               ) -> LoadedIndex:
    """Build the LMDB index at ``index_dir`` from the sorted item table at ``items_dir``
    and the consumer ``offsets`` derived from the log ((next offset, record offset) by
    (group, topic, queue)), keeping what the old index at ``old_index_dir`` knows that the
    log does not."""
    legacy, old_queues = read_old_index(old_index_dir)
    from_log = not legacy
    consumers = offsets if from_log else {k: (off, -1) for k, off in legacy.items()}
    files = part_files(items_dir)
    # LMDB needs a few times the compressed item bytes; the map grows on demand anyway.
    estimate = sum(os.path.getsize(p) for p in files)
    store = IndexStore(index_dir, map_size=max(1 << 30, 8 * estimate))
    try:
        counts, marks = write_items(store, files)
        queues = {K.split_queue_key(qkey): lo_hi for qkey, lo_hi in marks.items()}
        # A queue whose every record was deleted by retention has no record left to
        # derive its high-water mark from; the old index still knows it, and losing
        # it would hand out its queue offsets a second time.
        carried = {q: (hi, hi) for q, (_lo, hi) in old_queues.items() if q not in queues}
        queues.update(carried)
        items = sorted((K.queue_key(t, q), K.QUEUE_VALUE.pack(lo, hi))
                       for (t, q), (lo, hi) in queues.items())
        if items:
            put_sorted(store, "queues", items)
        # The floors retention recorded for the queues it emptied, applied exactly as
        # recovery's pass 5 does (this also covers a lost or unreadable old index).
        floors = read_floors(os.path.join(data_dir, QUEUE_FLOORS_FILE))
        floors_applied = store.apply_floors(floors)
        store.set_applied_offset(log_end)
        store.put_consumer_offsets(consumers, in_log=from_log)
        store.sync()
    finally:
        store.close()
    return LoadedIndex(counts, queues, len(carried), floors_applied, len(consumers), from_log)

