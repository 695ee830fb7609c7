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
    report. Consumer group offsets are derived from the log's OFFSET records; an index from
    before they were log records has its offsets carried into the new one (the open then
    writes them to the log once)."""
    require_data_dir(data_dir)  # never create an index (or LOCK) in another directory
    index_path = os.path.join(data_dir, INDEX_DIR)
    legacy: dict = {}
    # Hold the data dir's lock while the old index is read and deleted: a running broker
    # must not lose its index under its feet.
    with DataDirLock(data_dir):
        if index_exists(index_path):
            try:
                old = IndexStore(index_path)
                if not old.offsets_in_log():
                    legacy = old.consumer_offsets()
                old.close()
            except Exception:  # noqa: BLE001 - a damaged index: nothing to carry over
                legacy = {}
        destroy(index_path)
        if legacy:
            new = IndexStore(index_path)
            new.put_consumer_offsets({k: (off, -1) for k, off in legacy.items()}, in_log=False)
            new.close()
    broker = Broker.open(data_dir, config, progress=progress)
    try:
        return broker.recovery.to_dict()
    finally:
        broker.close()
