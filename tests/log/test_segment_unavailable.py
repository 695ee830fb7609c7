"""Running out of file descriptors when the log needs its next segment.

A child process lowers its real RLIMIT_NOFILE, opens descriptors until the kernel answers
EMFILE, and then writes what needs a new segment: a send, a batch, a prepare, a commit.
Each must be refused with the retriable SegmentUnavailable, store nothing and leave the log
usable; once the descriptors are freed the same requests succeed. The parent then reopens
the data directory and reads back everything the child had acknowledged.

Two segment sizes cover both ways a segment is made: 64 KiB segments are created inline at
the roll (the temporary file's open fails), 1 MiB segments are prepared in the background
beforehand (then the directory fsync of the install cannot open the directory).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

import fmq
from fmq.datadir import TEMP_SUFFIX
from fmq.log.fileio import FileIO
from fmq.log.log import Log
from fmq.log.reader import list_segments
from tests.crashkit import ROOT
from tests.workloads.descriptor_starved_writer import broker_config, message_body


def _run_child(data: str, segment_size: int) -> dict:
    res = subprocess.run([sys.executable, "-m", "tests.workloads.descriptor_starved_writer",
                          data, str(segment_size)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert res.returncode == 0, f"child failed:\n{res.stdout}\n{res.stderr}"
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("segment_size", [64 * 1024, 1 << 20], ids=["inline", "background"])
def test_out_of_descriptors_refuses_retriably_and_the_log_recovers(tmp_path, segment_size):
    data = str(tmp_path / "data")
    out = _run_child(data, segment_size)
    starved, freed = out["starved"], out["freed"]
    assert starved["log_failed"] == [], f"the log failed instead of refusing: {starved}"
    assert starved["failed_state"] is None
    assert sorted(starved["refused"]) == ["batch", "commit", "prepare", "send"], starved
    assert starved["end_unchanged"], "a refused request placed records anyway"
    assert sorted(freed["succeeded"]) == ["batch", "commit", "send", "send-after-roll"], freed

    with fmq.Broker.open(data, broker_config(segment_size)) as b:
        assert b.wait_indexed(30)
        for mid, qid, qoff in out["acked"]:
            got = b.reads.pull("orders", qid, qoff, 1)
            assert got and bytes(got[0].body) == message_body(mid), f"acknowledged {mid} lost"
        everything = [bytes(m.body).rstrip(b".").decode()
                      for ms in b.reads.all_messages(["orders"]).values() for m in ms]
        assert not [m for m in everything if m.startswith("refused")], \
            "a refused request was stored"
        assert "early-tx" in everything  # committed once descriptors were back, exactly once
        assert everything.count("early-tx") == 1
        assert b.transactions.open_transactions() == []


class NoDescriptorForSegments(FileIO):
    """The project's I/O seam: opening a new segment file fails with EMFILE while ``starved``
    (the real-limit test above cannot choose *which* creation of a batch fails)."""

    def __init__(self) -> None:
        self.starved_after = None  # let this many segment creations succeed, then EMFILE
        self.created = 0

    def open(self, path, flags, mode=0o644):
        if path.endswith(".seg" + TEMP_SUFFIX) and self.starved_after is not None:
            if self.created >= self.starved_after:
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
            self.created += 1
        return super().open(path, flags, mode)


def test_a_batch_needing_two_segments_is_stored_whole_or_not_at_all(tmp_path):
    data = str(tmp_path / "data")
    io = NoDescriptorForSegments()
    config = broker_config(16 * 1024)
    batch = [fmq.Message("orders", message_body(f"batch-{i}"), queue_id=i % 2)
             for i in range(12)]
    with fmq.Broker.open(data, config, io=io) as b:
        b.send(fmq.Message("orders", message_body("first")))
        end = b._log.next_offset
        io.starved_after = 1  # the batch's first new segment can be made, its second not
        with pytest.raises(fmq.SegmentUnavailable) as refused:
            b.send_batch(batch)
        assert refused.value.retriable and "ulimit" in str(refused.value)
        assert b._log.next_offset == end and b._log.failed is None
        io.starved_after = None
        results = b.send_batch(batch)
        assert len({b._log.segment_for(r.offset).base for r in results}) >= 3
    with fmq.Broker.open(data, config) as b:
        assert b.wait_indexed(30)
        got = [bytes(m.body).rstrip(b".").decode()
               for ms in b.reads.all_messages(["orders"]).values() for m in ms]
        assert sorted(got) == sorted(["first"] + [f"batch-{i}" for i in range(12)])


def test_unused_reserved_segment_is_removed_at_close(tmp_path):
    log = Log(str(tmp_path), 16 * 1024)
    log.start_at(0)
    with log.lock:
        log.reserve_locked([10_000, 10_000, 10_000])  # three segments, none used
    log.close()
    assert list_segments(str(tmp_path)) == []
