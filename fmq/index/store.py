"""The LMDB index: derived data, rebuildable from the log at any time.

One LMDB environment (``DATA_DIR/index``) with named databases:

=============  ============================================  ==================================
database       key                                           value
=============  ============================================  ==================================
``cq``         topic NUL, queue id u32, queue offset u64      data offset, size, tag hash,
                                                             store time, source offset
``queues``     topic NUL, queue id u32                        min offset, next offset
``keys``       topic NUL, key NUL, source offset u64          queue id, queue offset
``keyoff``     source offset u64                              the ``keys`` key (for retention)
``time``       topic NUL, queue id, store time, queue offset  (empty); only for every
                                                             ``keys.TIME_EVERY``-th queue
                                                             offset (a sparse time index)
``txends``     transaction id NUL producer group             1 commit / 0 rollback, offset
``txoff``      COMMIT/ROLLBACK offset u64                    the ``txends`` key (for retention)
``consumers``  group NUL, topic NUL, queue id                 next offset to consume, offset of
                                                             its OFFSET record
``timers``     due time u64, TIMER offset u64                size of the TIMER record
``timeroff``   TIMER offset u64                              the ``timers`` key
``timertopics`` topic (UTF-8)                                pending timers of the topic
``topics``     topic (UTF-8)                                 its configuration (JSON, from its
                                                             latest TOPIC record)
``meta``       ``applied``                                    log offset applied up to
``meta``       ``epoch/`` epoch u64                           start offset, node (fmq.index.epochs)
=============  ============================================  ==================================

The environment runs without per-commit fsync (``sync=False``): the log is the source of
truth. It survives a process kill; after a power loss it may be damaged, and then it is
rebuilt from the log. The checkpoint calls :meth:`IndexStore.sync` before it records an
applied offset. Entries and the applied offset are written in one LMDB transaction.

``consumers`` is derived from the log's OFFSET records like the rest. An index from before
offsets were in the log lacks the ``meta`` key ``offsets-in-log``: its ``consumers`` values
(8 bytes, no source) are known only to it, so a rebuild keeps them and the broker writes
them to the log once on its next open (:meth:`ConsumerOffsets.upgrade
<fmq.engine.offsets.ConsumerOffsets.upgrade>`).
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Iterable

import lmdb

from fmq import native
from fmq.datadir import index_exists
from fmq.errors import IndexCorrupt
from fmq.index import batch_puts as batch_puts_py
from fmq.index import item_batch as item_batch_py
from fmq.index import keys as K
from fmq.index import trim
from fmq.index.entries import (
    EpochEntry,
    OffsetEntry,
    QueueEntry,
    TimerEntry,
    TimerFired,
    TopicEntry,
    TxEnd,
)
from fmq.index.epochs import put_epoch, read_history
from fmq.index.lmdb_env import (
    APPLIED,
    DERIVED_DBS,
    FORMAT,
    OFFSETS_IN_LOG,
    ResizeGate,
    SharedEnv,
)
from fmq.index.opening import INDEX_FORMAT, open_env
from fmq.index.queue_tails import QueueTails
from fmq.index.timer_table import TimerReads, apply_timers
from fmq.index.topic_table import apply_topics, raise_topic_floors, read_topics
from fmq.index.tx_ends import TxEndReads

#: The queue entries' items of one transaction: from ``item_batch_py`` or its compiled twin
#: ``fmq.index._item_batch_c``.
ITEM_BATCH = native.choose(item_batch_py).item_batch
#: A batch's puts, database by database: py-lmdb's ``putmulti`` per database
#: (``batch_puts_py``), or its compiled twin ``fmq.index._batch_puts_c``, which makes them
#: with the interpreter lock released once for the batch instead of once per item.
PUT_BATCHES = native.choose(batch_puts_py).put_batches


class IndexStore:
    def __init__(self, path: str, map_size: int = 1 << 30, verify_length: bool = True,
                 create: bool = True) -> None:
        self.path = path
        #: ``outdated``: an older format this version rebuilds from the log
        #: (:func:`open_index`).
        env, self.db, self.outdated = open_env(path, map_size, verify_length, create)
        self._gate = ResizeGate()
        # The indexer process writes the same environment (index_writer "process").
        self.env = SharedEnv(env, self._gate)
        self._write_lock = threading.Lock()
        #: The followed queues' ranges and last entries, as this process's writes left them.
        self.tails = QueueTails()
        #: Reads of the pending timers (``timers``, ``timeroff``, ``timertopics``).
        self.timers = TimerReads(self.env, self.db, self._gate)
        #: Reads of the transaction ends (``txends``).
        self.tx_ends = TxEndReads(self.env, self.db, self._gate)

    # ------------------------------------------------------------------ writing

    def _write(self, fn, *args):
        """Run ``fn(txn, *args)`` in one write transaction, growing the map when full. The
        queues' tails in memory are dropped (LMDB alone knows what ``fn`` did to ranges)."""
        with self._write_lock:
            try:
                return self._write_locked(fn, *args)
            finally:
                self.tails.drop_all()

    def _write_locked(self, fn, *args):
        while True:
            try:
                with self._gate, self.env.begin(write=True) as txn:
                    return fn(txn, *args)
            except lmdb.MapFullError:
                self._gate.resize(self.env)

    def apply(self, entries: Iterable[QueueEntry], applied_offset: int,
              marks: Iterable[TxEnd | OffsetEntry | EpochEntry | TopicEntry] = (),
              timers: Iterable[TimerEntry | TimerFired] = ()) -> None:
        """Write ``entries``, ``marks`` (transaction ends and consumer offsets, in log
        order), ``timers`` (in log order) and the new applied offset in one transaction
        (idempotent). The followed queues' tails take the entries once committed."""
        entries = list(entries)
        with self._write_lock:
            try:
                ranges = self._write_locked(self._apply_txn, entries, applied_offset,
                                            list(marks), list(timers))
            except BaseException:
                self.tails.drop_all()  # committed or not: only LMDB knows
                raise
            if ranges is None:
                self.tails.drop_all()
            elif ranges:
                self.tails.extend(entries, ranges)

    def _apply_txn(self, txn: lmdb.Transaction, entries: list[QueueEntry], applied: int,
                   marks: list[TxEnd | OffsetEntry | EpochEntry | TopicEntry],
                   timers: list[TimerEntry | TimerFired]
                   ) -> dict[tuple[str, int], tuple[int, int]] | None:
        """The batch's writes; returns each touched queue's range after them, or None when
        it also changed ranges of queues it holds no entries of (a topic's floors)."""
        cq, times, keys, keyoff, bounds = ITEM_BATCH(entries)
        items: list[list[tuple[bytes, bytes]]] = [cq, times, keys, keyoff, [], []]
        topics: list[TopicEntry] = []  # applied after the queue entries (topic_table)
        for t in marks:
            if type(t) is OffsetEntry:  # in log order: a later commit overwrites
                txn.put(K.consumer_key(t.group, t.topic, t.queue_id),
                        K.CONSUMER_VALUE.pack(t.offset, t.source_offset), db=self.db.consumers)
                continue
            if type(t) is EpochEntry:
                put_epoch(txn, self.db, t)
                continue
            if type(t) is TopicEntry:
                topics.append(t)
                continue
            for db, k, v in K.end_items(t):
                items[db].append((k, v))
        handles = (self.db.cq, self.db.time, self.db.keys, self.db.keyoff, self.db.txends,
                   self.db.txoff)
        batches = [(db, db_items) for db, db_items in zip(handles, items, strict=True)
                   if db_items]
        for (_db, db_items), (consumed, _added) in zip(batches, PUT_BATCHES(txn, batches),
                                                         strict=True):
            if consumed != len(db_items):  # LMDB stored fewer than it was given
                raise IndexCorrupt(f"LMDB stored {consumed} of {len(db_items)} index items")
        ranges: dict[tuple[str, int], tuple[int, int]] = {}
        for q, (first, nxt) in bounds.items():
            prefix = K.queue_key(*q)
            old = txn.get(prefix, db=self.db.queues)
            # A queue first seen here starts at its first entry, not 0: a rebuild from a
            # log whose oldest segments retention deleted must match the live index.
            lo, hi = K.QUEUE_VALUE.unpack(old) if old else (first, first)
            if nxt > hi:
                txn.put(prefix, K.QUEUE_VALUE.pack(lo, nxt), db=self.db.queues)
                hi = nxt
            ranges[q] = (lo, hi)
        if timers:
            apply_timers(txn, self.db, timers)
        if topics:
            apply_topics(txn, self.db, topics)
        old = txn.get(APPLIED, db=self.db.meta)
        if old is None or K.I64.unpack(old)[0] < applied:
            txn.put(APPLIED, K.I64.pack(applied), db=self.db.meta)
        return None if topics else ranges

    def append_sorted(self, db_name: str, items: list[tuple[bytes, bytes]]) -> int:
        """Bulk load: append ``items`` (sorted, unique, after the database's last key) to
        the derived database ``db_name`` in one transaction, growing the map when full.
        Returns how many LMDB stored: append mode silently skips a key out of order or
        repeated, so a caller that gets fewer than ``len(items)`` has a conflict."""
        db = self.db.derived()[db_name]
        return self._write(lambda txn: txn.cursor(db=db).putmulti(items, append=True)[1])

    def set_applied_offset(self, offset: int) -> None:
        self._write(lambda txn: txn.put(APPLIED, K.I64.pack(offset), db=self.db.meta))

    def sync(self) -> None:
        self.env.sync(True)

    # ------------------------------------------------------------------ reading

    def applied_offset(self) -> int | None:
        with self._gate, self.env.begin() as txn:
            v = txn.get(APPLIED, db=self.db.meta)
        return None if v is None else K.I64.unpack(v)[0]

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        with self._gate, self.env.begin() as txn:
            v = txn.get(K.queue_key(topic, queue_id), db=self.db.queues)
        return K.QUEUE_VALUE.unpack(v) if v else (0, 0)

    def all_queues(self) -> dict[tuple[str, int], tuple[int, int]]:
        out = {}
        with self._gate, self.env.begin() as txn:
            for k, v in txn.cursor(db=self.db.queues):
                out[K.split_queue_key(k)] = K.QUEUE_VALUE.unpack(v)
        return out

    def queue_entries(self, topic: str, queue_id: int, start: int, limit: int
                      ) -> list[tuple[int, int, int, int, int]]:
        """Up to ``limit`` entries from queue offset ``start``: (queue offset, data offset,
        data size, tag hash, store time)."""
        with self._gate, self.env.begin() as txn:
            return self._entries_in(txn, topic, queue_id, start, limit)

    def _entries_in(self, txn, topic: str, queue_id: int, start: int, limit: int,
                    max_bytes: int | None = None) -> list[tuple[int, int, int, int, int]]:
        """Up to ``limit`` entries of the queue from ``start``, read in ``txn``; with
        ``max_bytes``, only those whose records add up to at most that (the first always)."""
        out: list[tuple[int, int, int, int, int]] = []
        prefix = K.queue_prefix(topic, queue_id)
        cur = txn.cursor(db=self.db.cq)
        if not cur.set_range(K.cq_key(topic, queue_id, start)):
            return out
        read = 0
        # The queue offset follows the prefix: read there (split_cq_key decoded the topic
        # of every entry: a Kafka fetch of 1 KiB records took 1.9-2.1 us a message with it,
        # 1.6 without).
        at, queue_offset = len(prefix), K.U64BE.unpack_from
        for k, v in cur:
            if not k.startswith(prefix) or len(out) >= limit:
                break
            qoff = queue_offset(k, at)[0]
            doff, dsize, th, st, _src = K.CQ_VALUE.unpack(v)
            if max_bytes is not None:
                read += dsize
                if read > max_bytes and out:
                    break
            out.append((qoff, doff, dsize, th, st))
        return out

    def queue_read(self, topic: str, queue_id: int, start: int, limit: int,
                   max_bytes: int | None = None
                   ) -> tuple[int, int, list[tuple[int, int, int, int, int]]]:
        """A pull's one read of the index: the queue's range (min offset, next offset) and
        up to ``limit`` of its entries (as :meth:`queue_entries`) from ``start`` or the
        min offset, whichever is higher, to the next offset, in one read transaction (a
        pull on the event loop paid two before, each a resize-gate lock round and a
        ``begin``). ``max_bytes``: only the entries whose records add up to at most that
        (the first always): a Kafka fetch of 1 MiB of a long queue read 4096 entries to
        keep a thousand.

        A queue being followed is answered from its tail in memory when that holds
        ``start`` (:mod:`fmq.index.queue_tails`): no transaction at all."""
        found = self.tails.read(topic, queue_id, start, limit, max_bytes)
        if found is not None:
            return found
        return self.queue_read_stored(topic, queue_id, start, limit, max_bytes)

    def queue_read_stored(self, topic: str, queue_id: int, start: int, limit: int,
                          max_bytes: int | None = None
                          ) -> tuple[int, int, list[tuple[int, int, int, int, int]]]:
        """:meth:`queue_read` from LMDB, whatever the tails hold (what they must equal)."""
        with self._gate, self.env.begin() as txn:
            v = txn.get(K.queue_prefix(topic, queue_id), db=self.db.queues)
            lo, hi = K.QUEUE_VALUE.unpack(v) if v else (0, 0)
            start = max(start, lo)
            limit = min(limit, hi - start)
            if limit <= 0:
                return lo, hi, []
            return lo, hi, self._entries_in(txn, topic, queue_id, start, limit, max_bytes)

    def queue_bytes(self, topic: str, queue_id: int) -> int:
        """Log bytes of the records a queue's entries point at (a walk of the queue)."""
        total = 0
        prefix = K.queue_prefix(topic, queue_id)
        with self._gate, self.env.begin() as txn:
            cur = txn.cursor(db=self.db.cq)
            if not cur.set_range(prefix):
                return 0
            for k, v in cur:
                if not k.startswith(prefix):
                    break
                total += K.CQ_VALUE.unpack(v)[1]
        return total

    def store_time(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        """Store time (ms) of the queue's entry at ``queue_offset``; None when absent."""
        with self._gate, self.env.begin() as txn:
            v = txn.get(K.cq_key(topic, queue_id, queue_offset), db=self.db.cq)
        return None if v is None else K.CQ_VALUE.unpack(v)[3]

    def key_lookup(self, topic: str, key: str, limit: int = 1000) -> list[tuple[int, int]]:
        """(queue id, queue offset) of messages with ``key``, oldest first."""
        out = []
        prefix = K.key_prefix(topic, key)
        with self._gate, self.env.begin() as txn:
            cur = txn.cursor(db=self.db.keys)
            if not cur.set_range(prefix):
                return out
            for k, v in cur:
                if not k.startswith(prefix) or len(out) >= limit:
                    break
                out.append(K.KEY_VALUE.unpack(v))
        return out

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int | None:
        """Queue offset of the first entry stored at or after ``timestamp_ms``; None when
        no entry is.

        The time index holds every :data:`~fmq.index.keys.TIME_EVERY`-th entry: the first
        of those stored at or after the time bounds the answer from above, and the entries
        since the one before it are read from ``cq`` (their values hold their store times).
        With no such entry, the answer can only lie after the queue's last one. Store times
        grow along a queue (the wall clock, read when placed), so this is the first entry
        at or after the time. Where the clock was set back, times do not grow, and the
        answer is the first such entry of the stretch the sampled entries point at (an
        index with every entry in ``time`` gave the entry of the lowest such time, no
        truer an answer)."""
        prefix = K.queue_prefix(topic, queue_id)
        every = K.TIME_EVERY
        with self._gate, self.env.begin() as txn:
            cur = txn.cursor(db=self.db.time)
            if (cur.set_range(K.time_key(topic, queue_id, timestamp_ms, 0))
                    and cur.key().startswith(prefix)):
                sampled = K.split_time_key(cur.key())[1]
                start, stop = max(sampled - every + 1, 0), sampled + 1
            else:
                v = txn.get(K.queue_key(topic, queue_id), db=self.db.queues)
                nxt = K.QUEUE_VALUE.unpack(v)[1] if v else 0
                if nxt <= 0:
                    return None
                start, stop = (nxt - 1) // every * every, nxt
            return _first_stored_at_or_after(txn.cursor(db=self.db.cq), topic, queue_id,
                                             start, stop, timestamp_ms)

    # ------------------------------------------------------------------ consumer offsets

    def put_consumer_offsets(self, offsets: dict[tuple[str, str, int], tuple[int, int]],
                             in_log: bool) -> None:
        """Store (next offset, source offset) per (group, topic, queue) and whether they are
        in the log (a rebuild loading derived offsets, or carrying an old index's)."""
        def fn(txn: lmdb.Transaction) -> None:
            for (group, topic, qid), (off, source) in offsets.items():
                value = K.CONSUMER_VALUE.pack(off, source) if in_log else K.I64.pack(off)
                txn.put(K.consumer_key(group, topic, qid), value, db=self.db.consumers)
            if in_log:
                txn.put(OFFSETS_IN_LOG, b"1", db=self.db.meta)
            else:
                txn.delete(OFFSETS_IN_LOG, db=self.db.meta)
        self._write(fn)

    def mark_offsets_in_log(self) -> None:
        """Record that every consumer offset here is in the log (after the upgrade)."""
        self._write(lambda txn: txn.put(OFFSETS_IN_LOG, b"1", db=self.db.meta))

    def offsets_in_log(self) -> bool:
        """False for an index from before consumer offsets were log records."""
        with self._gate, self.env.begin() as txn:
            return txn.get(OFFSETS_IN_LOG, db=self.db.meta) is not None

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        with self._gate, self.env.begin() as txn:
            v = txn.get(K.consumer_key(group, topic, queue_id), db=self.db.consumers)
        return None if v is None else K.consumer_value(v)[0]

    def consumer_offsets(self) -> dict[tuple[str, str, int], int]:
        return {k: off for k, (off, _src) in self.consumer_offset_sources().items()}

    def consumer_offset_sources(self) -> dict[tuple[str, str, int], tuple[int, int]]:
        """(next offset, log offset of its OFFSET record; -1 when not in the log) of every
        committed (group, topic, queue)."""
        with self._gate, self.env.begin() as txn:
            return {K.split_consumer_key(k): K.consumer_value(v)
                    for k, v in txn.cursor(db=self.db.consumers)}

    # ------------------------------------------------------------------ maintenance

    def epoch_history(self) -> list[EpochEntry]:
        """The terms the log records (EPOCH records), oldest first."""
        with self._gate, self.env.begin() as txn:
            return read_history(txn, self.db)

    def remove_from(self, log_end: int) -> int:
        """Delete every entry whose source record lies at or after ``log_end`` (index
        ahead of a cut log) and cap the applied offset. Returns entries removed."""
        return self._write(trim.remove_from, self.db, log_end)

    def remove_before(self, log_start: int) -> int:
        """Delete entries whose data lies before ``log_start`` (segments deleted by
        retention) and advance each queue's minimum offset. Returns entries removed."""
        return self._write(trim.remove_before, self.db, log_start)

    def raise_topic_floors(self, topic: str, floors: dict[int, int]) -> int:
        """Raise queues of ``topic`` to ``floors`` (by queue id), removing their entries
        below (a topic's own retention); returns the entries removed."""
        return self._write(raise_topic_floors, self.db, topic, floors)

    def topic_configs(self) -> dict[str, str]:
        """Every topic's configuration JSON (from its latest TOPIC record), by topic."""
        with self._gate, self.env.begin() as txn:
            return read_topics(txn, self.db)

    def apply_floors(self, floors: dict[tuple[str, int], int]) -> int:
        """Raise each queue's offsets to its floor (queue-floors file); returns how many
        queues changed."""
        return self._write(trim.raise_to_floors, self.db, floors)

    def clear_derived(self) -> None:
        """Empty every database derived from the log (consumer offsets too, unless they are
        not in the log yet: an index from before they were); the index then has this
        version's format."""
        def fn(txn):
            txn.put(FORMAT, INDEX_FORMAT, db=self.db.meta)
            in_log = txn.get(OFFSETS_IN_LOG, db=self.db.meta) is not None
            for name, db in self.db.derived().items():
                if in_log or name != "consumers":
                    txn.drop(db, delete=False)
            txn.delete(APPLIED, db=self.db.meta)
        self._write(fn)

    def dump(self) -> dict[str, list[tuple[bytes, bytes]]]:
        """Every key and value of every derived database (tests compare indexes with it)."""
        out = {}
        with self._gate, self.env.begin() as txn:
            for name in DERIVED_DBS:
                out[name.decode()] = list(txn.cursor(db=getattr(self.db, name.decode())))
        return out

    def close(self) -> None:
        self.env.close()

logger = logging.getLogger("fmq.index")


def _first_stored_at_or_after(cur: lmdb.Cursor, topic: str, queue_id: int, start: int,
                              stop: int, timestamp_ms: int) -> int | None:
    """The lowest queue offset in [start, stop) whose entry in ``cq`` was stored at or after
    ``timestamp_ms`` (a store time below 0 counts as 0, as in the ``time`` keys)."""
    prefix = K.queue_prefix(topic, queue_id)
    if not cur.set_range(K.cq_key(topic, queue_id, start)):
        return None
    for k, v in cur:
        if not k.startswith(prefix):
            return None
        qoff = K.split_cq_key(k)[2]
        if qoff >= stop:
            return None
        if max(K.CQ_VALUE.unpack(v)[3], 0) >= timestamp_ms:
            return qoff
    return None


def destroy(path: str) -> None:
    """Remove an index directory entirely."""
    shutil.rmtree(path, ignore_errors=True)


def open_index(path: str, map_size: int) -> tuple[IndexStore, bool]:
    """The index at ``path``; True when it must be rebuilt from the log (it was missing, or
    unusable and then emptied)."""
    rebuilt = not index_exists(path)
    try:
        index = IndexStore(path, map_size)
    except IndexCorrupt as exc:
        logger.warning("index unusable (%s): rebuilding it from the log", exc)
        destroy(path)
        index = IndexStore(path, map_size)
        rebuilt = True
    if index.outdated:
        logger.warning("index of an older format: rebuilding it from the log")
        rebuilt = True
    if rebuilt:
        index.clear_derived()
    return index, rebuilt
