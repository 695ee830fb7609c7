"""The in-process index rebuild: delete the index, open the broker (recovery replays the
whole log into a fresh index through the same redo code the crash path uses), close it."""

from __future__ import annotations

import os
from collections.abc import Callable

from fmq.config import BrokerConfig
from fmq.datadir import INDEX_DIR, DataDirLock, index_exists, require_data_dir
from fmq.engine.broker import Broker
from fmq.index.store import IndexStore, destroy


def rebuild_index(data_dir: str, config: BrokerConfig | None = None,
                  progress: Callable[[int, int], None] | None = None) -> dict:
    """Rebuild ``DATA_DIR/index`` from the log of a stopped broker; returns the recovery
    report. Consumer group offsets are carried over when the old index can be read."""
    require_data_dir(data_dir)  # never create an index (or LOCK) in another directory
    index_path = os.path.join(data_dir, INDEX_DIR)
    saved: dict = {}
    # Hold the data dir's lock while the old index is read and deleted: a running broker
    # must not lose its index (and the consumer offsets only it holds) under its feet.
    with DataDirLock(data_dir):
        if index_exists(index_path):
            try:
                old = IndexStore(index_path)
                saved = old.consumer_offsets()
                old.close()
            except Exception:  # noqa: BLE001 - a damaged index: nothing to carry over
                saved = {}
        destroy(index_path)
    broker = Broker.open(data_dir, config, progress=progress)
    try:
        for (group, topic, qid), off in saved.items():
            broker.index.commit_offset(group, topic, qid, off)
        return broker.recovery.to_dict()
    finally:
        broker.close()
