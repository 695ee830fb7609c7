"""Queue floors: the next offset of every queue when retention last ran.

Queue offsets are carried by the log's records, so an index rebuilt from the log knows
every queue that still has a record. A queue whose every message retention deleted has
none left: without this file a rebuilt index would restart it at offset 0, and a consumer
whose committed offset is higher would skip the new messages. Retention writes the file
(atomically, before it deletes anything); recovery raises every queue to its floor.

Format: UTF-8 JSON ``{"version": 1, "floors": [[topic, queue id, next offset], ...]}``,
a newline, and the CRC-32C of the JSON bytes as 8 hex digits.
"""

from __future__ import annotations

import json

from fmq.errors import CorruptCheckpoint
from fmq.log.fileio import OS_IO, FileIO
from fmq.log.record import crc32c

Floors = dict[tuple[str, int], int]


def encode_floors(floors: Floors) -> bytes:
    data = json.dumps({"version": 1, "floors": sorted([t, q, n] for (t, q), n in floors.items())},
                      separators=(",", ":")).encode()
    return data + b"\n" + f"{crc32c(data):08x}".encode()


def decode_floors(raw: bytes, path: str = "queue-floors") -> Floors:
    def bad(why: str) -> CorruptCheckpoint:
        return CorruptCheckpoint(
            f"{path} is damaged ({why}); it holds the queue offsets of queues that retention "
            f"emptied. Restore it from a backup, or delete it to let such queues restart at "
            f"offset 0 (consumers with higher committed offsets would skip messages)")

    data, sep, crc = raw.rpartition(b"\n")
    if not sep:
        raise bad("no checksum line")
    try:
        if int(crc, 16) != crc32c(data):
            raise bad("CRC-32C mismatch")
        doc = json.loads(data)
        floors = {(str(t), int(q)): int(n) for t, q, n in doc["floors"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise bad(str(exc)) from None
    if doc.get("version") != 1:
        raise bad(f"version {doc.get('version')!r}")
    return floors


def read_floors(path: str) -> Floors:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return {}
    return decode_floors(raw, path)


def write_floors(path: str, floors: Floors, io: FileIO = OS_IO) -> None:
    io.write_file_atomically(path, encode_floors(floors))
