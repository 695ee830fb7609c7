"""Loading the index items (the tasks' item files, :mod:`fmq.spark.item_files`, each
sorted by (database, key), merged on the way) into a fresh LMDB index on the driver, through
:meth:`IndexStore.append_sorted` (the store's own map-growth rule), with the queue marks
read off the items on the way, the queue floors retention recorded, the applied offset
and the consumer offsets: the latest OFFSET record of each queue, or the old index's when
that index is from before offsets were log records (the broker's next open writes those to
the log)."""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fmq.datadir import QUEUE_FLOORS_FILE, index_exists
from fmq.errors import IndexCorrupt
from fmq.index import keys as K
from fmq.index.entries import EpochEntry, TopicEntry
from fmq.index.store import IndexStore
from fmq.recovery.floors import read_floors
from fmq.spark.errors import RebuildConflict
from fmq.spark.item_files import file_batches, item_files, read_items

_WRITE_CHUNK = 50_000
#: Up to this many items in all (about 0.5 GB on the driver), the load sorts them in memory
#: instead of merging the files item by item (a log of several GB stays under it).
IN_MEMORY_ITEMS = 8_000_000
#: Items held in the merge's read batches, all files together.
_MERGE_MEMORY_ITEMS = 2_000_000

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


def _file_items(path: str, batch_size: int) -> Iterator[tuple[int, bytes, bytes]]:
    for whole in file_batches(path):
        for at in range(0, whole.num_rows, batch_size):
            batch = whole.slice(at, batch_size)
            yield from zip(batch.column("db").to_pylist(), batch.column("key").to_pylist(),
                           batch.column("value").to_pylist(), strict=True)


def merged_items(files: list[str]) -> Iterator[tuple[int, bytes, bytes]]:
    """(db, key, value) of every item of the sorted ``files``, in (db, key) order: a
    streaming merge, one batch per file in memory."""
    batch_size = max(1_000, min(_WRITE_CHUNK, _MERGE_MEMORY_ITEMS // max(1, len(files))))
    streams = [_file_items(path, batch_size) for path in files]
    if len(streams) == 1:
        return streams[0]
    return heapq.merge(*streams)


def write_items(store: IndexStore, files: list[str], in_memory_items: int = IN_MEMORY_ITEMS
                ) -> tuple[dict[str, int], dict[bytes, tuple[int, int]]]:
    """Write the sorted item files into the LMDB databases in key order. Returns the
    item counts and, read off the sorted consume-queue keys, each queue's (first queue
    offset in the log, last + 1) by queue key. Up to ``in_memory_items`` items in all are
    sorted in memory at once (pyarrow, no Python per item but the LMDB put); more are
    merged file by file, item by item, in bounded memory."""
    total = sum(batch.num_rows for path in files for batch in file_batches(path))
    if total <= in_memory_items:
        return _write_sorted_table(store, files)
    return _write_merged(store, files)


def _write_sorted_table(store: IndexStore, files: list[str]
                        ) -> tuple[dict[str, int], dict[bytes, tuple[int, int]]]:
    counts = dict.fromkeys(K.ITEM_DBS, 0)
    marks: dict[bytes, tuple[int, int]] = {}
    if not files:
        return counts, marks
    table = (pa.concat_tables([read_items(path) for path in files])
             .sort_by([("db", "ascending"), ("key", "ascending")]))
    dbs = table.column("db").to_numpy()
    cuts = (np.flatnonzero(np.diff(dbs)) + 1).tolist()
    for start, stop in zip([0, *cuts], [*cuts, len(dbs)], strict=True):
        db, part = int(dbs[start]), table.slice(start, stop - start)
        for at in range(0, part.num_rows, _WRITE_CHUNK):
            chunk = part.slice(at, _WRITE_CHUNK)
            put_sorted(store, K.ITEM_DBS[db], list(zip(chunk.column("key").to_pylist(),
                                                       chunk.column("value").to_pylist(),
                                                       strict=True)))
        counts[K.ITEM_DBS[db]] += part.num_rows
        if db == K.DB_CQ:
            marks = queue_marks(part.column("key").combine_chunks())
    return counts, marks


def queue_marks(cq_keys: pa.Array) -> dict[bytes, tuple[int, int]]:
    """(first queue offset, last + 1) per queue key of the sorted consume-queue keys
    (queue key + queue offset as u64 big-endian)."""
    if not len(cq_keys):
        return {}
    ends = np.frombuffer(cq_keys.buffers()[1], dtype=np.int32)[
        cq_keys.offset + 1 : cq_keys.offset + len(cq_keys) + 1]
    data = np.frombuffer(cq_keys.buffers()[2], dtype=np.uint8)
    qoffs = data[ends[:, None] - 8 + np.arange(8)].copy().view(">u8").ravel()
    queues = pc.binary_slice(cq_keys, 0, -8)
    # Sorted keys: each queue's keys are one run, its offsets ascending.
    changes = pc.not_equal(queues.slice(1), queues.slice(0, len(queues) - 1))
    firsts = [0, *(np.flatnonzero(changes.to_numpy(zero_copy_only=False)) + 1).tolist()]
    lasts = [*(i - 1 for i in firsts[1:]), len(queues) - 1]
    return {queues[f].as_py(): (int(qoffs[f]), int(qoffs[la]) + 1)
            for f, la in zip(firsts, lasts, strict=True)}


def _write_merged(store: IndexStore, files: list[str]
                  ) -> tuple[dict[str, int], dict[bytes, tuple[int, int]]]:
    counts = dict.fromkeys(K.ITEM_DBS, 0)
    marks: dict[bytes, tuple[int, int]] = {}
    current = -1
    pending: list[tuple[bytes, bytes]] = []

    def flush() -> None:
        if pending:
            put_sorted(store, K.ITEM_DBS[current], pending)
            counts[K.ITEM_DBS[current]] += len(pending)
            pending.clear()

    for db, k, v in merged_items(files):
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
               log_end: int, offsets: dict[tuple[str, str, int], tuple[int, int]],
               epochs: Sequence[EpochEntry] = (),
               topics: Sequence[TopicEntry] = ()) -> LoadedIndex:
    """Build the LMDB index at ``index_dir`` from the sorted item table at ``items_dir``
    and the consumer ``offsets`` derived from the log ((next offset, record offset) by
    (group, topic, queue)), keeping what the old index at ``old_index_dir`` knows that the
    log does not."""
    legacy, old_queues = read_old_index(old_index_dir)
    from_log = not legacy
    consumers = offsets if from_log else {k: (off, -1) for k, off in legacy.items()}
    files = item_files(items_dir)
    # LMDB needs about twice the raw item bytes (pages, branches); the map grows on demand
    # anyway.
    estimate = sum(os.path.getsize(p) for p in files)
    store = IndexStore(index_dir, map_size=max(1 << 30, 3 * estimate))
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
        # The epoch history (EPOCH records), then the topics' configurations in log order,
        # whose deletes raise queue floors over the entries loaded above, as the online
        # index's topic table does.
        store.apply([], log_end, [*sorted(epochs), *sorted(topics, key=lambda t: t[2])])
        store.set_applied_offset(log_end)
        store.put_consumer_offsets(consumers, in_log=from_log)
        store.sync()
    finally:
        store.close()
    return LoadedIndex(counts, queues, len(carried), floors_applied, len(consumers), from_log)

