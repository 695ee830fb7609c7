"""The checkpoint file: where recovery starts replaying the log.

``recovery offset = min(index-applied log offset, PREPARE offset of the oldest open
transaction)``. Everything before it is in the index (synced) and belongs to no open
transaction, so redo can start there.

File layout (little-endian, 40 bytes)::

    0   8  magic      b"FMQCKPT1"
    8   8  recovery_offset   u64
    16  8  applied_offset    u64  (index-applied offset when written)
    24  8  log_end           u64  (log end when written; informational)
    32  4  written_at        u32  seconds since the epoch
    36  4  crc               CRC-32C of bytes [0, 36)

Written atomically: temp file, fsync, rename, fsync of the directory.
"""

from __future__ import annotations

import os
import struct
import time
from dataclasses import asdict, dataclass

from fmq.errors import CorruptCheckpoint
from fmq.log.fileio import OS_IO, FileIO
from fmq.log.record import crc32c

MAGIC = b"FMQCKPT1"
_BODY = struct.Struct("<8sQQQI")
_CRC = struct.Struct("<I")
SIZE = _BODY.size + _CRC.size


@dataclass(frozen=True)
class Checkpoint:
    recovery_offset: int
    applied_offset: int
    log_end: int
    written_at: int

    def to_dict(self) -> dict:
        return asdict(self)


def encode_checkpoint(cp: Checkpoint) -> bytes:
    body = _BODY.pack(MAGIC, cp.recovery_offset, cp.applied_offset, cp.log_end, cp.written_at)
    return body + _CRC.pack(crc32c(body))


def decode_checkpoint(data: bytes) -> Checkpoint:
    if len(data) != SIZE:
        raise CorruptCheckpoint(f"checkpoint file has {len(data)} bytes, expected {SIZE}")
    body = data[: _BODY.size]
    (crc,) = _CRC.unpack_from(data, _BODY.size)
    if crc32c(body) != crc:
        raise CorruptCheckpoint("checkpoint CRC-32C mismatch")
    magic, recovery, applied, log_end, written = _BODY.unpack(body)
    if magic != MAGIC:
        raise CorruptCheckpoint(f"checkpoint magic {magic!r} not recognised")
    return Checkpoint(recovery, applied, log_end, written)


def read_checkpoint(path: str) -> Checkpoint | None:
    """The checkpoint at ``path``; None when there is none. Raises CorruptCheckpoint."""
    try:
        with open(path, "rb") as f:
            data = f.read(SIZE + 1)
    except FileNotFoundError:
        return None
    return decode_checkpoint(data)


def write_checkpoint(path: str, recovery_offset: int, applied_offset: int, log_end: int,
                     io: FileIO = OS_IO) -> Checkpoint:
    cp = Checkpoint(recovery_offset, applied_offset, log_end, int(time.time()))
    io.write_file_atomically(path, encode_checkpoint(cp))
    return cp


def remove_stale_temp(path: str) -> None:
    try:
        os.unlink(path + ".tmp")
    except FileNotFoundError:
        pass
