"""The rebuild's item files: the index items (database, key, value) one Spark task wrote,
sorted by (database, key), in the Arrow IPC file format, which the driver maps into
memory and reads without decoding (the files live only for the job, in the temporary
directory next to the output index).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator

import pyarrow as pa

from fmq.spark.items import ITEMS_ARROW

SUFFIX = ".arrow"
#: Rows per record batch in a file: what the driver's streaming merge holds per file.
FILE_BATCH_ROWS = 50_000


def item_path(directory: str, name: str, part: int) -> str:
    """The file of task ``part`` of the writer ``name`` (``scan``, ``txends``, ...)."""
    return os.path.join(directory, f"{name}-{part:06d}{SUFFIX}")


def write_item_file(items: list[pa.RecordBatch], path: str) -> int:
    """Write the index items ``items`` to ``path`` sorted by (database, key), unless there
    are none; returns how many. Written aside and renamed: a retried or speculative task
    never leaves half a file."""
    table = pa.Table.from_batches(items, schema=ITEMS_ARROW)
    if not table.num_rows:
        return 0
    table = table.sort_by([("db", "ascending"), ("key", "ascending")])
    tmp = f"{path}.{os.getpid()}.tmp"
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, ITEMS_ARROW) as writer:
        writer.write_table(table, max_chunksize=FILE_BATCH_ROWS)
    os.replace(tmp, path)
    return table.num_rows


def item_files(directory: str) -> list[str]:
    """The item files under ``directory``."""
    return sorted(glob.glob(os.path.join(directory, "**", "*" + SUFFIX), recursive=True))


def file_batches(path: str) -> Iterator[pa.RecordBatch]:
    """The record batches of one item file, mapped, not copied."""
    reader = pa.ipc.open_file(pa.memory_map(path))
    for i in range(reader.num_record_batches):
        yield reader.get_batch(i)


def read_items(path: str) -> pa.Table:
    """One item file as a table (mapped, not copied)."""
    return pa.ipc.open_file(pa.memory_map(path)).read_all()
