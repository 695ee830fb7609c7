"""The column-wise batches: the numpy header layout is the record format's."""

from __future__ import annotations

import numpy as np

from fmq.log.reader import list_segments
from fmq.log.record import HEADER
from fmq.log.scanner import LogScanner
from fmq.spark.batches import HEADER_DTYPE, gather

from .damage import log_dir, segment_path


def test_header_dtype_reads_every_header_as_the_struct_does(built_log):
    bases = list_segments(log_dir(built_log.path))
    seen = 0
    for rec in LogScanner(log_dir(built_log.path), copy_body=False):
        base = max(b for b in bases if b <= rec.log_offset)
        with open(segment_path(built_log.path, base), "rb") as f:
            f.seek(rec.log_offset - base)
            raw = f.read(HEADER.size)
        got = np.frombuffer(raw, dtype=HEADER_DTYPE)[0]
        assert tuple(int(v) for v in got.tolist()) == HEADER.unpack(raw)
        seen += 1
    assert seen > 150


def test_gather_concatenates_ranges_with_arrow_offsets():
    data = np.frombuffer(b"abcdefghij", dtype=np.uint8)
    raw, offsets = gather(data, np.array([1, 5, 9, 0]), np.array([2, 0, 1, 3]))
    assert raw.tobytes() == b"bcjabc"
    assert offsets.tolist() == [0, 2, 2, 3, 6]
