"""The rebuild's one pass over the log: segments read in ranges give the same index, the
range size follows the log and the cores, and the driver's merge of the tasks' sorted item
files yields every item once in (database, key) order."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pytest

from fmq.index.store import IndexStore
from fmq.spark.bulk_load import merged_items, write_items
from fmq.spark.item_files import item_files, write_item_file
from fmq.spark.items import ITEMS_ARROW
from fmq.spark.rebuild import MIN_SPLIT_BYTES, run_rebuild, split_bytes
from fmq.spark.scan import ScanJob
from fmq.spark.source import DEFAULT_SPLIT_BYTES, FmqReader

from .conftest import SEGMENT
from .damage import log_dir
from .test_rebuild import _dump, assert_same_index

pytestmark = pytest.mark.timeout(600)


def test_segments_read_in_ranges_give_the_online_index(spark, built_log, log_copy, tmp_path):
    out = str(tmp_path / "idx")
    result = run_rebuild(log_copy, master="local[2]", out_dir=out, range_bytes=SEGMENT // 4)
    # Every full segment became several tasks: queue runs, transactions and keys cross
    # the range boundaries.
    assert result["scan_tasks"] >= 3 * result["segments"]
    assert_same_index(_dump(out), built_log.online_dump)
    assert result["torn_tail"]["offset"] == built_log.torn_offset
    assert result["log_end"] == built_log.log_end


def test_range_size_gives_three_tasks_per_core_within_bounds():
    mib = 1 << 20
    assert split_bytes([(0, 120 * mib), (120 * mib, 120 * mib)], 2) == 40 * mib
    assert split_bytes([(0, 120 * mib), (120 * mib, 120 * mib)], 1) == DEFAULT_SPLIT_BYTES
    assert split_bytes([(0, 2 * mib)], 2) == MIN_SPLIT_BYTES  # small logs: no tiny tasks
    assert split_bytes([(0, 100_000 * mib)], 2) == DEFAULT_SPLIT_BYTES
    assert split_bytes([], 2) == MIN_SPLIT_BYTES


def _items(rng: random.Random, n: int, taken: set) -> list[tuple[int, bytes, bytes]]:
    """``n`` items with (database, key) pairs no other call gave (LMDB keys are unique)."""
    out = []
    while len(out) < n:
        db, key = rng.randrange(4), rng.randbytes(rng.randrange(1, 6))
        if (db, key) not in taken:
            taken.add((db, key))
            out.append((db, key, rng.randbytes(3)))
    return out


def test_merge_of_sorted_item_files_is_every_item_in_key_order(tmp_path):
    rng = random.Random(16)
    files, everything, taken = [], [], set()
    for task in range(5):
        items = _items(rng, rng.choice([0, 1, 2500]), taken)
        everything += items
        batch = pa.RecordBatch.from_pylist(
            [{"db": d, "key": k, "value": v} for d, k, v in items], schema=ITEMS_ARROW)
        path = str(tmp_path / f"scan-{task}.arrow")
        if write_item_file([batch], path):
            files.append(path)
        else:
            assert not os.path.exists(path)  # no file for a task without items
    merged = list(merged_items(sorted(files)))
    assert merged == sorted(everything)


def test_in_memory_sort_and_streaming_merge_load_the_same_index(built_log, tmp_path):
    # The scan's item files of the test log, made by the tasks' own code in this process
    # (ranges of a quarter segment, so queues run across many files).
    items = str(tmp_path / "items")
    os.makedirs(items)
    job = ScanJob(FmqReader(log_dir(built_log.path), {"torntail": "allow",
                                                      "splitbytes": str(SEGMENT // 4)}),
                  items, 0, str(tmp_path))
    for task in range(len(job.partitions)):
        job.scan(task)
    files = item_files(items)
    assert len(files) > 10
    loaded = []
    for in_memory in (0, 1 << 30):
        store = IndexStore(str(tmp_path / f"idx-{in_memory}"))
        try:
            counts, marks = write_items(store, files, in_memory_items=in_memory)
            loaded.append((counts, marks, store.dump()))
        finally:
            store.close()
    assert loaded[0] == loaded[1]
    counts, marks, dump = loaded[0]
    assert counts["cq"] == len(dump["cq"]) == len(built_log.online_dump["cq"])
    # The marks read off the keys: each queue's first offset still in the log and last + 1.
    expected: dict[bytes, tuple[int, int]] = {}
    for key, _value in dump["cq"]:
        qkey, qoff = key[:-8], int.from_bytes(key[-8:], "big")
        lo, hi = expected.get(qkey, (qoff, qoff))
        expected[qkey] = (min(lo, qoff), max(hi, qoff + 1))
    assert marks == expected and len(marks) > 5
