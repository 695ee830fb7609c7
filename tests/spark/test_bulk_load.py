"""The driver's LMDB bulk load: append mode's silent skips are caught, a full map grows,
consumer offsets come from the log unless the old index predates that."""

from __future__ import annotations

import pytest

from fmq.index.store import IndexStore
from fmq.spark.bulk_load import load_index, put_sorted
from fmq.spark.errors import RebuildConflict


def test_out_of_order_key_fails_instead_of_being_skipped(tmp_path):
    store = IndexStore(str(tmp_path / "idx"))
    try:
        with pytest.raises(RebuildConflict, match="took 2 of 3 keys"):
            put_sorted(store, "cq", [(b"a", b"1"), (b"c", b"2"), (b"b", b"3")])
        with pytest.raises(RebuildConflict):
            put_sorted(store, "time", [(b"a", b""), (b"a", b"")])
    finally:
        store.close()


def test_full_map_grows_and_the_batch_is_written_once(tmp_path):
    store = IndexStore(str(tmp_path / "idx"), map_size=1 << 20)
    items = [(i.to_bytes(8, "big"), bytes(200)) for i in range(20_000)]  # ~4 MB > 1 MiB
    try:
        put_sorted(store, "cq", items)
        assert store.env.info()["map_size"] > 1 << 20
        with store.env.begin() as txn:
            assert list(txn.cursor(db=store.db.cq)) == items
    finally:
        store.close()


def _loaded_offsets(tmp_path, old_offsets: dict | None, in_log: bool) -> tuple[dict, bool]:
    old_dir, new_dir, items = (str(tmp_path / n) for n in ("old", "new", "items"))
    if old_offsets is not None:
        old = IndexStore(old_dir)
        old.put_consumer_offsets(old_offsets, in_log=in_log)
        old.close()
    loaded = load_index(new_dir, items, old_dir, str(tmp_path), 0,
                        {("g", "t", 0): (5, 4000)})  # what the log's OFFSET records say
    store = IndexStore(new_dir)
    try:
        assert loaded.consumers_from_log == store.offsets_in_log()
        return store.consumer_offset_sources(), store.offsets_in_log()
    finally:
        store.close()


def test_consumer_offsets_come_from_the_log(tmp_path):
    assert _loaded_offsets(tmp_path, {("g", "t", 0): (9, 100)}, in_log=True) == (
        {("g", "t", 0): (5, 4000)}, True)


def test_an_old_index_without_offsets_in_the_log_has_its_offsets_carried(tmp_path):
    # the broker's next open writes them to the log (ConsumerOffsets.upgrade)
    assert _loaded_offsets(tmp_path, {("g", "t", 1): (9, -1)}, in_log=False) == (
        {("g", "t", 1): (9, -1)}, False)
