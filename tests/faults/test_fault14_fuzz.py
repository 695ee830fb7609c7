"""Fault 14: the record decoder, the segment scanner and the checkpoint parser fuzzed with
random bytes (Hypothesis).

They raise only FMQ's typed errors (:class:`fmq.FMQError` subclasses), never accept a
record whose CRC-32C fails, never hand out a record whose header names another position,
and never allocate from an unchecked length (peak memory stays near the input size even
when a length field says 4 GiB).
"""

from __future__ import annotations

import os
import struct
import tempfile
import tracemalloc
from contextlib import contextmanager

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fmq.datadir import format_segment_name
from fmq.errors import FMQError
from fmq.log.record import (
    HEADER_SIZE,
    Record,
    RecordType,
    crc32c,
    decode,
    decode_properties,
    encode,
    filler,
)
from fmq.log.scanner import LogScanner
from fmq.recovery.checkpoint import (
    SIZE as CHECKPOINT_SIZE,
)
from fmq.recovery.checkpoint import (
    Checkpoint,
    decode_checkpoint,
    encode_checkpoint,
    read_checkpoint,
)

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def crc_ok(buf: bytes, pos: int, length: int) -> bool:
    (stored,) = struct.unpack_from("<I", buf, pos + 4)
    return crc32c(memoryview(buf)[pos + 8 : pos + length]) == stored


def sample_record(offset: int, body: bytes = b"hello", rtype=RecordType.MESSAGE) -> bytes:
    return encode(Record(rtype, log_offset=offset, topic="orders", queue_id=1, queue_offset=7,
                         key="k", tags="t", properties={"a": "b"}, body=body,
                         tx_id="tx" if rtype != RecordType.MESSAGE else ""))


@FUZZ
@given(st.binary(max_size=600), st.integers(0, 1 << 40))
@example(b"\xff\xff\xff\xff" + bytes(100), 0)
@example(struct.pack("<I", HEADER_SIZE) + bytes(HEADER_SIZE - 4), 0)
def test_decoder_random_bytes_only_typed_errors(data, base):
    try:
        rec = decode(data, 0, base_offset=base)
    except FMQError:
        return
    # accepted: it must be a whole, CRC-checked record that knows where it lies
    assert crc_ok(data, 0, rec.size)
    assert rec.log_offset == base


@FUZZ
@given(st.binary(min_size=1, max_size=400), st.data())
def test_decoder_never_accepts_a_record_whose_crc_fails(body, data):
    offset = data.draw(st.integers(0, 1 << 30))
    rtype = data.draw(st.sampled_from([RecordType.MESSAGE, RecordType.PRE_MESSAGE,
                                       RecordType.TX_MESSAGE]))
    raw = bytearray(sample_record(offset, body, rtype))
    pos = data.draw(st.integers(0, len(raw) - 1))
    flip = data.draw(st.integers(1, 255))
    raw[pos] ^= flip
    try:
        rec = decode(bytes(raw), 0, base_offset=offset)
    except FMQError:
        return
    raise AssertionError(f"a record with byte {pos} changed was accepted: {rec!r}")


@FUZZ
@given(st.binary(max_size=300))
def test_properties_parser_only_typed_errors(data):
    try:
        props = decode_properties(data, 0)
    except FMQError:
        return
    assert isinstance(props, dict)


@FUZZ
@given(st.binary(max_size=200))
def test_checkpoint_parser_only_typed_errors(data):
    try:
        cp = decode_checkpoint(data)
    except FMQError:
        return
    assert len(data) == CHECKPOINT_SIZE
    assert crc32c(data[:-4]) == struct.unpack_from("<I", data, len(data) - 4)[0]
    assert isinstance(cp, Checkpoint)


@FUZZ
@given(st.integers(0, CHECKPOINT_SIZE - 1), st.integers(1, 255))
def test_checkpoint_with_any_byte_changed_is_refused(pos, flip):
    raw = bytearray(encode_checkpoint(Checkpoint(4096, 8192, 9000, 1_700_000_000)))
    raw[pos] ^= flip
    try:
        decode_checkpoint(bytes(raw))
    except FMQError:
        return
    raise AssertionError(f"a checkpoint with byte {pos} changed was accepted")


def test_checkpoint_file_random_bytes(tmp_path):
    import random

    rng = random.Random(14)
    path = str(tmp_path / "checkpoint")
    for n in list(range(0, 60)) + [4096]:
        with open(path, "wb") as f:
            f.write(rng.randbytes(n))
        try:
            read_checkpoint(path)
        except FMQError:
            continue


SEG = 4096


@st.composite
def segment_files(draw):
    """1-3 segment files of random bytes, with valid records and fillers mixed in."""
    files = []
    for i in range(draw(st.integers(1, 3))):
        base = i * SEG
        buf = bytearray(draw(st.binary(min_size=0, max_size=SEG)))
        buf += bytes(SEG - len(buf)) if draw(st.booleans()) else b""
        pos = 0
        for _ in range(draw(st.integers(0, 4))):
            pos = draw(st.integers(pos, max(pos, len(buf) - 1))) if buf else 0
            rec = sample_record(base + pos, draw(st.binary(max_size=60)))
            if pos + len(rec) <= len(buf):
                buf[pos : pos + len(rec)] = rec
                pos += len(rec)
        if draw(st.booleans()) and pos + HEADER_SIZE <= len(buf):
            buf[pos : pos + HEADER_SIZE] = filler(base + pos)
        files.append((base, bytes(buf)))
    return files


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(segment_files())
def test_scanner_random_segments_only_typed_errors(files):
    with tempfile.TemporaryDirectory() as d:
        bufs = {}
        for base, buf in files:
            with open(os.path.join(d, format_segment_name(base)), "wb") as f:
                f.write(buf)
            bufs[base] = buf
        for policy in ("raise", "skip"):
            scanner = LogScanner(d, on_corruption=policy, max_record_size=SEG)
            try:
                for rec in scanner:
                    base = max(b for b in bufs if b <= rec.log_offset)
                    pos = rec.log_offset - base
                    assert crc_ok(bufs[base], pos, rec.size), "a record with a bad CRC came out"
            except FMQError:
                assert policy == "raise", "the skip policy raised"


@contextmanager
def allocation_peak():
    """The peak of traced memory above what was allocated when the block began, in
    ``result[0]``. Works whether or not tracing already runs (``python -X tracemalloc``):
    then it neither restarts nor stops it, and counts only what the block allocated."""
    result = [0]
    already = tracemalloc.is_tracing()
    if not already:
        tracemalloc.start()
    base, _peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    try:
        yield result
    finally:
        _cur, peak = tracemalloc.get_traced_memory()
        result[0] = peak - base
        if not already:
            tracemalloc.stop()


def test_no_allocation_from_an_unchecked_length():
    """A header claiming a 4 GiB record over a few bytes allocates nothing near that."""
    hostile = bytearray(sample_record(0, b"x" * 100))
    struct.pack_into("<I", hostile, 0, 0xFFFFFFF0)
    with allocation_peak() as peak:
        for max_size in (1 << 20, 0xFFFFFFFF):
            try:
                decode(bytes(hostile), 0, max_record_size=max_size)
            except FMQError:
                pass
    assert peak[0] < 256 * 1024, f"decoding a hostile length allocated {peak[0]} bytes"
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, format_segment_name(0)), "wb") as f:
            f.write(bytes(hostile) + bytes(4096))
        with allocation_peak() as peak:
            try:
                list(LogScanner(d, on_corruption="skip"))
            except FMQError:
                pass
        assert peak[0] < 1 << 20, f"scanning a hostile length allocated {peak[0]} bytes"
