"""File names of the data directory, in one place, with paired format/parse helpers.

Segments are named by their base log offset, zero-padded to 20 digits so that ``ls`` sorts
them in log order: ``00000000000067108864.seg``.
"""

from __future__ import annotations

import re

SEGMENT_SUFFIX = ".seg"
TEMP_SUFFIX = ".tmp"
_SEGMENT_RE = re.compile(r"^(\d{20})\.seg$")

LOG_DIR = "log"
INDEX_DIR = "index"
CHECKPOINT_FILE = "checkpoint"
QUEUE_FLOORS_FILE = "queue-floors"
LOCK_FILE = "LOCK"


def format_segment_name(base_offset: int) -> str:
    if base_offset < 0:
        raise ValueError("segment base offset must be >= 0")
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base offset of a segment file name, or None for any other file."""
    m = _SEGMENT_RE.match(name)
    return int(m.group(1)) if m else None
