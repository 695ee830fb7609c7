"""Segments, rolling, group commit and the failed state of the log."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from fmq.datadir import format_segment_name, parse_segment_name
from fmq.errors import LogFailed
from fmq.log.fileio import FileIO
from fmq.log.log import Log
from fmq.log.reader import list_segments
from fmq.log.record import HEADER_SIZE, Record, RecordType
from fmq.log.scanner import LogScanner


def append(log: Log, body: bytes = b"x" * 100, sync: bool = True) -> Record:
    rec = Record(RecordType.MESSAGE, topic="t", queue_id=0, queue_offset=0, body=body)
    with log.lock:
        log.append_locked(rec)
    log.wait_durable(rec.end_offset, sync=sync)
    return rec


def test_segment_names_are_20_digit_base_offsets():
    assert format_segment_name(67108864) == "00000000000067108864.seg"
    assert parse_segment_name("00000000000067108864.seg") == 67108864
    assert parse_segment_name("00000000000067108864.seg.tmp") is None
    assert parse_segment_name("checkpoint") is None


def test_records_never_straddle_segments(tmp_path):
    log = Log(str(tmp_path), 4096)
    log.start_at(0)
    recs = [append(log, b"y" * 700) for _ in range(20)]
    for r in recs:
        seg = log.segment_for(r.log_offset)
        assert r.end_offset + HEADER_SIZE <= seg.end  # room for the filler is kept
    bases = list_segments(str(tmp_path))
    assert bases == [i * 4096 for i in range(len(bases))] and len(bases) > 3
    # every sealed segment ends with its filler
    fillers = [r for r in LogScanner(str(tmp_path)) if r.type == RecordType.FILLER]
    assert len(fillers) == len(bases) - 1
    for name in os.listdir(tmp_path):
        assert os.path.getsize(tmp_path / name) == 4096  # preallocated
    log.close()


def test_group_commit_shares_fsyncs_and_acks_only_durable_offsets(tmp_path):
    log = Log(str(tmp_path), 1 << 20)
    log.start_at(0)
    violations = []
    per_thread = 100

    def writer():
        for _ in range(per_thread):
            rec = append(log)
            if log.flushed_offset < rec.end_offset:
                violations.append(rec.log_offset)

    threads = [threading.Thread(target=writer) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not violations
    total = 16 * per_thread
    assert log.flush_count < total  # fsyncs were shared
    assert sum(1 for _ in LogScanner(str(tmp_path))) == total
    log.close()


class FailingIO(FileIO):
    """fdatasync fails with EIO after ``ok`` successful calls."""

    def __init__(self, ok: int, err: int = errno.EIO) -> None:
        self.ok = ok
        self.err = err

    def fdatasync(self, fd: int) -> None:
        if self.ok <= 0:
            raise OSError(self.err, os.strerror(self.err))
        self.ok -= 1
        super().fdatasync(fd)


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC])
def test_failed_fsync_fails_the_log_for_good(tmp_path, err):
    log = Log(str(tmp_path), 1 << 20, FailingIO(ok=3, err=err))
    log.start_at(0)
    for _ in range(3):
        append(log)
    with pytest.raises(LogFailed, match=os.strerror(err)):
        append(log)
    flushed = log.flushed_offset
    with pytest.raises(LogFailed):  # never retried, never pretended
        append(log)
    with pytest.raises(LogFailed):
        log.flush()
    assert log.flushed_offset == flushed
    log.close()


def test_failed_fsync_wakes_every_waiter(tmp_path):
    log = Log(str(tmp_path), 1 << 20, FailingIO(ok=0))
    log.start_at(0)
    outcomes = []

    def writer():
        try:
            append(log)
            outcomes.append("acked")
        except LogFailed:
            outcomes.append("failed")

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert outcomes == ["failed"] * 8


def test_async_writes_reach_the_os_and_flush_later(tmp_path):
    log = Log(str(tmp_path), 1 << 20)
    log.start_at(0)
    rec = append(log, sync=False)
    assert log.flushed_offset < rec.end_offset  # written, not yet synced
    log.flush()
    assert log.flushed_offset >= rec.end_offset
    log.close()


def test_truncate_zeroes_the_tail_and_drops_later_segments(tmp_path):
    log = Log(str(tmp_path), 4096)
    log.start_at(0)
    recs = [append(log, b"z" * 900) for _ in range(10)]
    cut = recs[5].log_offset
    deleted = log.truncate(cut)
    assert deleted and all(parse_segment_name(n) > cut for n in deleted)
    log.close()
    scanner = LogScanner(str(tmp_path))
    offsets = [r.log_offset for r in scanner if r.type == RecordType.MESSAGE]
    assert offsets == [r.log_offset for r in recs[:5]]
    assert scanner.end_offset == cut and scanner.torn is None


def test_large_segments_are_prepared_ahead_in_the_background(tmp_path):
    size = 2 << 20
    log = Log(str(tmp_path), size)
    log.start_at(0)
    first = append(log, b"a")
    for _ in range(3):  # fill three segments
        while log.segment_for(log.next_offset - 1).base == log.active_segment.base and \
                log.next_offset < log.active_segment.base + size - 70_000:
            append(log, b"b" * 60_000, sync=False)
        append(log, b"c" * 60_000)
    log.flush()
    spare_thread = log._files._spare_thread
    assert spare_thread is not None  # the segment after the active one is being prepared
    spare_thread.join(30)
    assert log._files._spare is not None and log._files._spare[0] == log.active_segment.end
    assert os.path.exists(os.path.join(tmp_path, format_segment_name(log.active_segment.end))
                          + ".tmp")
    bases = list_segments(str(tmp_path))
    assert len(bases) >= 3 and all(os.path.getsize(tmp_path / format_segment_name(b)) == size
                                   for b in bases)
    log.close()
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]  # discarded at close
    records = [r for r in LogScanner(str(tmp_path)) if r.type == RecordType.MESSAGE]
    assert records[0].log_offset == first.log_offset and len(records) > 100


def test_a_leftover_temp_segment_is_removed_on_open(tmp_path):
    with open(tmp_path / (format_segment_name(4096) + ".tmp"), "wb") as f:
        f.write(b"half-prepared")
    log = Log(str(tmp_path), 4096)
    assert os.listdir(tmp_path) == []
    log.close()
