"""What an operator asks first, read from the index: each topic's queues, messages, bytes and
store times, each consumer group's committed offsets and lag, disk usage, and moving a
group's offsets (``fmq topics``, ``fmq groups``, ``fmq stats``, the metrics).

Everything here is a read of the index (a consistent LMDB snapshot per call) except
:func:`reset_offsets`, which commits offsets through the same path as a consumer's commit
(one batch of OFFSET records for all the queues it moves).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping

from fmq.datadir import INDEX_DIR, LOG_DIR
from fmq.engine.group_lag import group_lag_rows, queue_ranges
from fmq.engine.offsets import ConsumerOffsets
from fmq.engine.queues import Queues
from fmq.engine.reads import Reader
from fmq.errors import InvalidArgument, UnknownTopic
from fmq.index.store import IndexStore
from fmq.log.placement import now_ms
from fmq.message import (
    check_name,
    check_offset,
    check_queue_id,
    check_topic,
    is_internal_topic,
)

RESET_TARGETS = ("earliest", "latest", "time", "offset")


def topic_summaries(index: IndexStore, queue_count: Callable[[str], int]) -> list[dict]:
    """Per topic: queue count, consumable messages, their stored bytes (a walk of the
    topic's queue entries: proportional to its messages), first and last store time."""
    by_topic: dict[str, list[tuple[int, int, int]]] = {}
    for (topic, qid), (lo, hi) in index.all_queues().items():
        by_topic.setdefault(topic, []).append((qid, lo, hi))
    out = []
    for topic in sorted(by_topic):
        messages = size = 0
        first = last = None
        for qid, lo, hi in by_topic[topic]:
            if hi <= lo:
                continue
            messages += hi - lo
            size += index.queue_bytes(topic, qid)
            t0, t1 = index.store_time(topic, qid, lo), index.store_time(topic, qid, hi - 1)
            first = t0 if first is None or (t0 is not None and t0 < first) else first
            last = t1 if last is None or (t1 is not None and t1 > last) else last
        out.append({"topic": topic, "queues": queue_count(topic), "messages": messages,
                    "bytes": size, "first_store_time": first, "last_store_time": last})
    return out


def disk_usage(data_dir: str) -> dict:
    """Bytes the log's segment files and the index take on disk (allocated blocks)."""
    def used(path: str) -> tuple[int, int]:
        total = files = 0
        for entry in os.scandir(path) if os.path.isdir(path) else ():
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_blocks * 512
                files += 1
        return total, files

    log_bytes, segments = used(os.path.join(data_dir, LOG_DIR))
    index_bytes, _ = used(os.path.join(data_dir, INDEX_DIR))
    return {"log_bytes": log_bytes, "segment_files": segments, "index_bytes": index_bytes}


def reset_offsets(reader: Reader, offsets: ConsumerOffsets, index: IndexStore,
                  queue_count: Callable[[str], int], group: str, topic: str | None,
                  queue_id: int | None, to: str, value: int | None,
                  execute: bool = True) -> list[dict]:
    """Move ``group``'s committed offsets: of one queue, of every queue of ``topic``, or
    (no topic) of every queue the group committed in but its retry and dead-letter topics
    (``%RETRY%G``, ``%DLQ%G``: rewinding those redelivers retried messages and redrives
    dead letters again, so they move only when named as ``topic``). ``to``: ``earliest``,
    ``latest``, ``time`` (``value`` = ms since the epoch) or ``offset`` (``value``, clamped
    to the queue's consumable range). Returns each queue's old and new offset; with
    ``execute`` false that is only the plan and nothing moves."""
    check_name(group, "group", allow_none=False)
    if to not in RESET_TARGETS:
        raise InvalidArgument(f"reset target must be one of {', '.join(RESET_TARGETS)}, "
                              f"not {to!r}")
    if to in ("time", "offset"):
        if value is None:
            raise InvalidArgument(f"a reset to a {to} needs a value (--to-{to})")
        check_offset(value, "timestamp_ms" if to == "time" else "offset")
    if topic is not None:
        check_topic(topic)
        qids = ([check_queue_id(queue_id, queue_count(topic))] if queue_id is not None
                else range(queue_count(topic)))
        queues = [(topic, q) for q in qids]
    else:
        if queue_id is not None:
            raise InvalidArgument("--queue needs --topic")
        committed = {(t, q) for (g, t, q) in index.consumer_offsets() if g == group}
        queues = sorted((t, q) for t, q in committed if not is_internal_topic(t))
        if not queues and committed:
            raise InvalidArgument(f"group {group!r} committed only in its retry and "
                                  f"dead-letter topics; name the one to reset (--topic)")
        if not queues:
            raise InvalidArgument(f"group {group!r} has no committed offsets; name the "
                                  f"topic to reset (--topic)")
    changes = []
    for t, q in queues:
        lo, hi = index.queue_range(t, q)
        if to == "earliest":
            new = lo
        elif to == "latest":
            new = hi
        elif to == "time":
            new = reader.offset_for_time(t, q, value)
        else:
            new = min(max(value, lo), hi)
        old = reader.committed_offset(group, t, q)
        changes.append({"group": group, "topic": t, "queue_id": q, "old": old, "new": new})
    if execute:
        offsets.commit(group, [(c["topic"], c["queue_id"], c["new"]) for c in changes])
    return changes


class Inventory:
    """The functions above for one open broker (``broker.inventory``); ``check_open()``
    raises once the broker is closed."""

    def __init__(self, data_dir: str, index: IndexStore, queues: Queues, reader: Reader,
                 offsets: ConsumerOffsets, check_open: Callable[[], None],
                 topic_exists: Callable[[str], bool] = lambda _name: True) -> None:
        self._data_dir = data_dir
        self._topic_exists = topic_exists
        self._index = index
        self._queues = queues
        self._reader = reader
        self._offsets = offsets
        self._check_open = check_open

    def topics(self) -> list[dict]:
        self._check_open()
        return topic_summaries(self._index, self._queues.queue_count)

    def groups(self, group: str | None = None,
               subscribed: Mapping[str, Iterable[str]] | None = None) -> list[dict]:
        """Each group's offsets and lag in every queue of its topics
        (:mod:`fmq.engine.group_lag`); ``subscribed``: the topics live members name."""
        self._check_open()
        if group is not None:
            check_name(group, "group", allow_none=False)
        return group_lag_rows(self._index, now_ms(), self._queues.queue_count, group, subscribed)

    def queue_ranges(self) -> list[dict]:
        self._check_open()
        return queue_ranges(self._index)

    def queue_shapes(self) -> dict[tuple[str, int], tuple[int, int, int | None, int | None]]:
        """(lo, hi, first store time, last store time) of every queue: a few index reads a
        queue, whatever its length (the console's topic figures)."""
        self._check_open()
        index, out = self._index, {}
        for (topic, qid), (lo, hi) in index.all_queues().items():
            if hi > lo:
                out[topic, qid] = (lo, hi, index.store_time(topic, qid, lo),
                                   index.store_time(topic, qid, hi - 1))
            else:
                out[topic, qid] = (lo, hi, None, None)
        return out

    def queue_bytes(self, topic: str, queue_id: int, start: int, end: int) -> int:
        """Log bytes of the queue's entries in [start, end): a walk of those entries, so a
        caller keeps the range short (the console counts chunks, a few at a time)."""
        self._check_open()
        return sum(size for qoff, _data, size, _tag, _time
                   in self._index.queue_entries(topic, queue_id, start, end - start)
                   if qoff < end)

    def disk_usage(self) -> dict:
        return disk_usage(self._data_dir)

    def reset_offsets(self, group: str, topic: str | None, queue_id: int | None, to: str,
                      value: int | None = None, execute: bool = True) -> list[dict]:
        self._check_open()
        if topic is not None and not self._topic_known(group, topic):
            # queue_count gives any name the default queues: a typo would plan (and
            # execute) offsets for a topic that is not there.
            raise UnknownTopic(topic)
        return reset_offsets(self._reader, self._offsets, self._index, self._queues.queue_count,
                             group, topic, queue_id, to, value, execute)

    def _topic_known(self, group: str, topic: str) -> bool:
        """Whether ``topic`` exists (created and not deleted, or holding data), or
        ``group`` has offsets in it (a deleted topic's stale offsets may still move)."""
        if is_internal_topic(topic) or self._topic_exists(topic):
            return True
        return any(g == group and t == topic for g, t, _q in self._index.consumer_offsets())

    def traffic(self) -> dict[str, dict[str, int]]:
        """Per topic, messages and body bytes written and read since the broker opened."""
        out: dict[str, dict[str, int]] = {}
        for name, counts in (("messages_in", self._queues.messages_in),
                             ("bytes_in", self._queues.bytes_in),
                             ("messages_out", self._reader.messages_out),
                             ("bytes_out", self._reader.bytes_out)):
            for topic, n in dict(counts).items():
                out.setdefault(topic, {"messages_in": 0, "bytes_in": 0, "messages_out": 0,
                                       "bytes_out": 0})[name] = n
        return out
