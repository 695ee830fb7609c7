"""Torn tails versus corruption, as the scanner classifies them."""

from __future__ import annotations

import os

import pytest

from fmq.datadir import format_segment_name
from fmq.errors import CorruptLog
from fmq.log.log import Log
from fmq.log.reader import DamageKind, OnCorruption, list_segments
from fmq.log.record import Record, RecordType
from fmq.log.scanner import LogScanner, log_end


def build(path, n=12, body=b"q" * 300, seg=4096) -> list[Record]:
    log = Log(str(path), seg)
    log.start_at(0)
    recs = []
    for i in range(n):
        rec = Record(RecordType.MESSAGE, topic="t", queue_id=0, queue_offset=i, body=body)
        with log.lock:
            log.append_locked(rec)
        recs.append(rec)
    log.flush()
    log.close()
    return recs


def poke(path, offset: int, data: bytes, seg=4096) -> None:
    base = offset // seg * seg
    with open(os.path.join(path, format_segment_name(base)), "r+b") as f:
        f.seek(offset - base)
        f.write(data)


def test_clean_log(tmp_path):
    recs = build(tmp_path)
    scanner = LogScanner(str(tmp_path))
    got = [r.log_offset for r in scanner if r.type != RecordType.FILLER]
    assert got == [r.log_offset for r in recs]
    assert scanner.end_offset == recs[-1].end_offset and scanner.torn is None


@pytest.mark.parametrize("garbage", [False, True], ids=["zeroed", "garbage"])
def test_damaged_last_record_is_a_torn_tail(tmp_path, garbage):
    recs = build(tmp_path)
    last = recs[-1]
    # the record's second half never reached the disk
    half = last.size // 2
    poke(str(tmp_path), last.log_offset + half,
         (b"\xa5" if garbage else b"\x00") * (last.size - half))
    scanner = LogScanner(str(tmp_path))
    list(scanner)
    assert scanner.torn is not None and scanner.torn.offset == last.log_offset
    assert scanner.end_offset == last.log_offset


def test_flipped_byte_in_a_sealed_segment_is_corruption(tmp_path):
    recs = build(tmp_path)
    victim = recs[1]
    assert victim.end_offset < 4096  # in the first, sealed segment
    poke(str(tmp_path), victim.log_offset + 100, b"\xff")
    with pytest.raises(CorruptLog) as info:
        list(LogScanner(str(tmp_path)))
    assert info.value.offset == victim.log_offset
    assert info.value.segment == format_segment_name(0)
    assert "fmq log verify" in str(info.value)


def test_skip_policy_reports_and_continues(tmp_path):
    recs = build(tmp_path)
    poke(str(tmp_path), recs[1].log_offset + 100, b"\xff")
    scanner = LogScanner(str(tmp_path), on_corruption="skip")
    got = [r.log_offset for r in scanner if r.type == RecordType.MESSAGE]
    assert recs[1].log_offset not in got and len(got) == len(recs) - 1
    assert [d.offset for d in scanner.damages] == [recs[1].log_offset]


def test_zeroed_record_before_valid_ones_is_corruption(tmp_path):
    recs = build(tmp_path)
    victim = recs[-3]
    poke(str(tmp_path), victim.log_offset, bytes(victim.size))
    with pytest.raises(CorruptLog):
        list(LogScanner(str(tmp_path)))


def test_missing_middle_segment_is_corruption(tmp_path):
    build(tmp_path, n=30)
    os.unlink(os.path.join(tmp_path, format_segment_name(4096)))
    with pytest.raises(CorruptLog, match="missing"):
        list(LogScanner(str(tmp_path)))


def _log_end_of(path, seg=4096) -> int:
    """log_end computed from the last valid record, as the Spark rebuild does."""
    last = None
    for rec in LogScanner(str(path)):
        last = rec
    bases = list_segments(str(path))
    sizes = {b: seg for b in bases}
    if last is None:
        return log_end(bases, sizes, None, 0, False)
    return log_end(bases, sizes, last.log_offset // seg * seg, last.end_offset,
                   last.type == RecordType.FILLER)


@pytest.mark.parametrize("cut", ["none", "torn_last", "after_filler"])
def test_log_end_agrees_with_the_scanner(tmp_path, cut):
    recs = build(tmp_path)
    if cut == "torn_last":
        poke(str(tmp_path), recs[-1].log_offset + 10, b"\x00" * (recs[-1].size - 10))
    elif cut == "after_filler":  # the last segment holds nothing valid: zero it all
        last_base = list_segments(str(tmp_path))[-1]
        poke(str(tmp_path), last_base, b"\x00" * 4096)
    scanner = LogScanner(str(tmp_path))
    list(scanner)
    assert _log_end_of(tmp_path) == scanner.end_offset


def test_policies_and_kinds_are_enums_that_still_read_as_their_names(tmp_path):
    recs = build(tmp_path)
    poke(str(tmp_path), recs[1].log_offset + 100, b"\xff")
    by_enum = LogScanner(str(tmp_path), on_corruption=OnCorruption.SKIP)
    by_name = LogScanner(str(tmp_path), on_corruption="skip")
    assert [r.log_offset for r in by_enum] == [r.log_offset for r in by_name]
    assert by_enum.damages == by_name.damages
    assert by_enum.damages[0].kind is DamageKind.CORRUPT
    assert by_enum.damages[0].to_dict()["kind"] == "corrupt"
    with pytest.raises(ValueError):
        LogScanner(str(tmp_path), on_corruption="ignore")
