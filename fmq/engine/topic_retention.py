"""A topic's own retention: a logical floor per queue.

One log holds every topic, so a topic's ``retention_ms`` or ``retention_bytes`` cannot
delete segments by itself. Instead each pass raises the floor of each of the topic's
queues past the messages its retention no longer keeps: older than ``retention_ms`` (by
store time), or, walking back from the newest, beyond ``retention_bytes`` of stored records
in that queue. The index removes the entries below the floor: those messages are no longer
readable, a consumer behind the floor skips to it (as after a segment deletion), and the
space comes back when the broker's own retention deletes the segments holding them.

The floors are a function of the log, the settings and the clock, not of the log alone:
they are raised when the broker opens (before it serves, so a rebuilt index hides the same
messages again) and on every retention pass (``retention_interval_ms``).
"""

from __future__ import annotations

import time

from fmq.index.store import IndexStore
from fmq.topic_config import TopicConfig

#: Queue entries read per index call while summing a queue's bytes.
_CHUNK = 4096


def queue_floor(index: IndexStore, cfg: TopicConfig, queue_id: int, now_ms: int) -> int:
    """The lowest queue offset ``cfg``'s retention keeps in queue ``queue_id`` now."""
    lo, hi = index.queue_range(cfg.name, queue_id)
    floor = lo
    if cfg.retention_ms is not None:
        first = index.offset_for_time(cfg.name, queue_id, now_ms - cfg.retention_ms)
        floor = max(floor, hi if first is None else first)
    if cfg.retention_bytes is not None and floor < hi:
        sizes: list[tuple[int, int]] = []  # (queue offset, stored bytes), oldest first
        start = floor
        while start < hi:
            entries = index.queue_entries(cfg.name, queue_id, start, _CHUNK)
            if not entries:
                break
            sizes += [(qoff, size) for qoff, _doff, size, _th, _st in entries]
            start = entries[-1][0] + 1
        kept = 0
        for qoff, size in reversed(sizes):
            kept += size
            if kept > cfg.retention_bytes:
                floor = max(floor, qoff + 1)
                break
    return floor


def enforce_topic_retention(index: IndexStore, topics: list[TopicConfig],
                            now: float | None = None) -> int:
    """Raise the floors of every topic with a retention of its own; returns the messages
    that became unreadable."""
    now_ms = int((time.time() if now is None else now) * 1000)
    removed = 0
    for cfg in topics:
        if cfg.deleted or (cfg.retention_ms is None and cfg.retention_bytes is None):
            continue
        # Every queue, even one whose floor has not moved: recovery's redo may have put
        # back entries below it, and this removes them again.
        floors = {qid: queue_floor(index, cfg, qid, now_ms) for qid in range(cfg.queues)}
        removed += index.raise_topic_floors(cfg.name, floors)
    return removed
