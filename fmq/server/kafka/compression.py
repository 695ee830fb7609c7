"""The compression codecs of record batches (the low three bits of a batch's attributes):
none, gzip, snappy, lz4 and zstd, decompressed with a bound on the output so that a small
hostile batch cannot expand into gigabytes."""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

#: The framing the Java client wraps snappy blocks in (xerial's snappy-java).
XERIAL_MAGIC = b"\x82SNAPPY\x00"


class DecompressionError(ValueError):
    """Bytes that do not decompress, or decompress beyond the limit."""


def decompress(codec: int, data: bytes, limit: int) -> bytes:
    """``data`` decompressed with ``codec``, at most ``limit`` bytes of output."""
    try:
        if codec == GZIP:
            out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, limit + 1)
        elif codec == SNAPPY:
            out = _snappy(data, limit)
        elif codec == LZ4:
            out = lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=limit + 1)
        elif codec == ZSTD:
            reader = zstandard.ZstdDecompressor().stream_reader(data)
            out = reader.read(limit + 1)
        else:
            raise DecompressionError(f"compression codec {codec} is not one of Kafka's")
    except DecompressionError:
        raise
    except Exception as exc:  # each library has its own error types
        raise DecompressionError(f"{NAMES[codec]} data does not decompress: {exc}") from None
    if len(out) > limit:
        raise DecompressionError(f"{NAMES[codec]} data decompresses past {limit} bytes "
                                 f"(max_frame_size)")
    return bytes(out)


def _snappy(data: bytes, limit: int) -> bytes:
    if data[:8] != XERIAL_MAGIC:
        return _snappy_block(data, limit)
    out, pos, total = [], 16, 0  # magic, version, compatible version
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        block = _snappy_block(data[pos + 4:pos + 4 + size], limit - total)
        total += len(block)
        out.append(block)
        pos += 4 + size
    return b"".join(out)


def _snappy_block(data: bytes, limit: int) -> bytes:
    # A raw snappy block begins with its uncompressed length: check it before expanding.
    length, shift = 0, 0
    for i, byte in enumerate(data[:5]):
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
        if i == 4:
            raise DecompressionError("snappy length is not a varint")
    if length > limit:
        raise DecompressionError(f"snappy data decompresses past {limit} bytes "
                                 f"(max_frame_size)")
    return bytes(cramjam.snappy.decompress_raw(data))
