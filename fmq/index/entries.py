"""What a record contributes to the index (:mod:`fmq.index.derive`, the rules) and the
entries it makes (:mod:`fmq.index.entry_types`): the one place the rest of FMQ imports
them from, and the one place the derivation's implementation is chosen.

``derive`` runs compiled (``fmq.index._derive_c``: the same source compiled by Cython,
setup.py) where ``fmq.native.choose`` picks it, else as it is; either makes the very same
entry classes, so code that tests ``type(item) is QueueEntry`` works with both.
:data:`TWINS` lists each chosen function next to its reference (tests/native compares them).
"""

from __future__ import annotations

from fmq import native
from fmq.index import derive as derive_py
from fmq.index.entry_types import (
    TOPIC_CONFIG_PROPERTY,
    EpochEntry,
    IndexItem,
    Mark,
    OffsetEntry,
    QueueEntry,
    TimerChange,
    TimerEntry,
    TimerFired,
    TopicEntry,
    TxEnd,
)

#: The derivation running: ``derive_py`` or its compiled twin ``fmq.index._derive_c``.
DERIVE_MODULE = native.choose(derive_py)

tag_hash = DERIVE_MODULE.tag_hash
queue_entry = DERIVE_MODULE.queue_entry
tx_end = DERIVE_MODULE.tx_end
offset_entry = DERIVE_MODULE.offset_entry
epoch_entry = DERIVE_MODULE.epoch_entry
topic_entry = DERIVE_MODULE.topic_entry
index_mark = DERIVE_MODULE.index_mark
timer_changes = DERIVE_MODULE.timer_changes
index_items = DERIVE_MODULE.index_items
sort_items = DERIVE_MODULE.sort_items

#: Each chosen function next to its reference, by name: what the twin tests compare.
TWINS: dict[str, tuple[object, object]] = {
    name: (getattr(derive_py, name), getattr(DERIVE_MODULE, name))
    for name in ("tag_hash", "queue_entry", "tx_end", "offset_entry", "epoch_entry",
                 "topic_entry", "index_mark", "timer_changes", "index_items", "sort_items")
}

__all__ = [
    "DERIVE_MODULE", "TOPIC_CONFIG_PROPERTY", "TWINS", "EpochEntry", "IndexItem", "Mark",
    "OffsetEntry", "QueueEntry", "TimerChange", "TimerEntry", "TimerFired", "TopicEntry",
    "TxEnd", "epoch_entry", "index_items", "index_mark", "offset_entry", "queue_entry",
    "sort_items", "tag_hash", "timer_changes", "topic_entry", "tx_end",
]
