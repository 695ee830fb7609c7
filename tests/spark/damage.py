"""Byte surgery on a copied data directory, for the Spark tests."""

from __future__ import annotations

import os

from fmq.datadir import LOG_DIR, format_segment_name
from fmq.log.reader import list_segments
from fmq.log.record import HEADER_SIZE, RecordType, crc32c
from fmq.log.scanner import LogScanner


def log_dir(data_dir: str) -> str:
    return os.path.join(data_dir, LOG_DIR)


def segment_path(data_dir: str, base: int) -> str:
    return os.path.join(log_dir(data_dir), format_segment_name(base))


def records(data_dir: str) -> list:
    return list(LogScanner(log_dir(data_dir), copy_body=False))


def flip_body_byte_in_sealed_segment(data_dir: str) -> tuple[str, int]:
    """Flip one body byte of a MESSAGE in the second segment (not the last one); returns
    (segment name, record offset)."""
    bases = list_segments(log_dir(data_dir))
    assert len(bases) >= 3
    base = bases[1]
    victim = next(r for r in records(data_dir)
                  if base <= r.log_offset < bases[2] and r.type == RecordType.MESSAGE
                  and len(r.body) > 10)
    with open(segment_path(data_dir, base), "r+b") as f:
        f.seek(victim.log_offset - base + victim.size - 5)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    return format_segment_name(base), victim.log_offset


def delete_middle_segment(data_dir: str) -> tuple[str, int]:
    """Remove the second segment file: the log has a hole."""
    bases = list_segments(log_dir(data_dir))
    os.unlink(segment_path(data_dir, bases[1]))
    return format_segment_name(bases[2]), bases[1]


def zero_filler_of_first_segment(data_dir: str) -> tuple[str, int]:
    """Zero the filler that seals the first segment (it stops without its filler while
    valid records follow in later segments)."""
    bases = list_segments(log_dir(data_dir))
    filler = next(r for r in records(data_dir) if r.type == RecordType.FILLER)
    with open(segment_path(data_dir, bases[0]), "r+b") as f:
        f.seek(filler.log_offset - bases[0])
        f.write(bytes(HEADER_SIZE))
    return format_segment_name(bases[0]), filler.log_offset


def garbage_segment_after_the_last(data_dir: str) -> tuple[str, int]:
    """A new segment after the last one holding only garbage (a roll whose first write
    was torn), on top of the torn tail already there."""
    bases = list_segments(log_dir(data_dir))
    last = bases[-1]
    size = os.path.getsize(segment_path(data_dir, last))
    with open(segment_path(data_dir, last + size), "wb") as f:
        f.write(b"\x07" * 100 + bytes(size - 100))
    return format_segment_name(last + size), last + size


def bad_text_with_valid_crc_in_sealed_segment(data_dir: str) -> tuple[str, int]:
    """Make the topic of a MESSAGE in the second segment invalid UTF-8 and recompute its
    CRC: the record passes every header check but its text does not decode (what a bug,
    not a disk, would write)."""
    bases = list_segments(log_dir(data_dir))
    base = bases[1]
    victim = next(r for r in records(data_dir)
                  if base <= r.log_offset < bases[2] and r.type == RecordType.MESSAGE)
    with open(segment_path(data_dir, base), "r+b") as f:
        f.seek(victim.log_offset - base)
        raw = bytearray(f.read(victim.size))
        raw[HEADER_SIZE] = 0xFF
        raw[4:8] = crc32c(bytes(raw[8:])).to_bytes(4, "little")
        f.seek(victim.log_offset - base)
        f.write(raw)
    return format_segment_name(base), victim.log_offset
