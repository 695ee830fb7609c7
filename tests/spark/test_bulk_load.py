"""The driver's LMDB bulk load: append mode's silent skips are caught, a full map grows."""

from __future__ import annotations

import pytest

from fmq.index.store import IndexStore
from fmq.spark.bulk_load import put_sorted
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
