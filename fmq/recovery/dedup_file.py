"""The dedup window saved at a clean close (``DATA_DIR/dedup-window``), so that the final
checkpoint can sit at the log end and the next open replays nothing, as before idempotent
sends existed.

Layout: the window as UTF-8 JSON (``{"format": 2, "log_offset": F, "window": ...}``, see
:meth:`fmq.dedup.DedupWindow.export`), then the CRC-32C of those bytes
(u32, little-endian). Written atomically (temp file, fsync, rename, directory fsync).
Format 1 (written before the window was kept per principal) is still read: its entries are
the sends of no principal, as its records are.

The file holds the window as it was after every record before log offset ``F``. Recovery
seeds the window from it when its replay starts at or before ``F`` (the replay then adds
the rest; remembering a record twice changes nothing); a replay that starts after ``F``
(a checkpoint written since, which keeps what the window remembers to replay) ignores it.
A damaged file makes recovery replay the whole log rather than guess.
"""

from __future__ import annotations

import json
import os
import struct

from fmq.dedup import DedupWindow
from fmq.errors import CorruptCheckpoint
from fmq.log.fileio import FileIO
from fmq.log.record import crc32c

DEDUP_WINDOW_FILE = "dedup-window"
_CRC = struct.Struct("<I")
FORMAT = 2


def write_window(path: str, window: DedupWindow, log_offset: int, io: FileIO) -> None:
    """Save ``window`` as it is after every record before ``log_offset``."""
    body = json.dumps({"format": FORMAT, "log_offset": log_offset, "window": window.export()},
                      separators=(",", ":")).encode()
    io.write_file_atomically(path, body + _CRC.pack(crc32c(body)))


def read_window(path: str) -> tuple[int, dict] | None:
    """(log offset, window data) of the file at ``path``; None when there is none. Raises
    CorruptCheckpoint for a damaged file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    body, crc = data[:-_CRC.size], data[-_CRC.size:]
    if len(data) < _CRC.size or _CRC.unpack(crc)[0] != crc32c(body):
        raise CorruptCheckpoint(f"{path}: CRC-32C mismatch")
    try:
        doc = json.loads(body)
        if doc["format"] not in (1, FORMAT):
            raise CorruptCheckpoint(f"{path}: format {doc['format']!r} not recognised")
        window = doc["window"] if doc["format"] == FORMAT else _from_format_1(doc["window"])
        return int(doc["log_offset"]), window
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptCheckpoint(f"{path}: {exc}") from None


def _from_format_1(window: dict) -> dict:
    """A format-1 window (keyed without a principal) in format 2's layout."""
    return {"producers": [[None, producer, *entry]
                          for producer, entry in window["producers"].items()],
            "message_ids": [[None, *entry] for entry in window["message_ids"]]}


def remove_window(path: str, io: FileIO) -> None:
    """Remove a saved window that no longer applies (nothing to remember at a close)."""
    if os.path.exists(path):
        io.unlink(path)
