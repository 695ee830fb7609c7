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
import resource
import subprocess
import sys

import pytest

import fmq
from fmq.datadir import TEMP_SUFFIX
from fmq.log.fileio import FileIO
from fmq.log.log import Log
from fmq.log.reader import list_segments
from fmq.log.sizing import encoded_size

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BODY = 3000


def _config(segment_size: int) -> fmq.BrokerConfig:
    return fmq.BrokerConfig(segment_size=segment_size, max_message_size=4096,
                            checkpoint_interval_ms=0, retention_interval_ms=0,
                            queues_per_topic=2, tx_check_after_ms=60_000)


def _body(tag: str) -> bytes:
    return tag.encode().ljust(BODY, b".")


def _fill_active_segment(broker: fmq.Broker, acked: list, tag: str) -> None:
    """Send until the next message of BODY bytes no longer fits: the next write rolls."""
    size = encoded_size(fmq.Message("orders", _body("x")))
    i = 0
    while broker.log.fits_in_active(size):
        mid = f"{tag}-{i}"
        r = broker.send(fmq.Message("orders", _body(mid), queue_id=i % 2))
        acked.append([mid, r.queue_id, r.queue_offset])
        i += 1


def _exhaust_descriptors() -> list[int]:
    """Lower the soft limit a little above what is open and take every descriptor left."""
    open_now = len(os.listdir("/proc/self/fd"))
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 16, hard))
    held = []
    while True:
        try:
            held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as exc:
            assert exc.errno == 24, exc  # EMFILE
            return held


def _attempt(outcome: dict, what: str, fn) -> object:
    try:
        result = fn()
    except fmq.SegmentUnavailable as exc:
        assert exc.retriable
        outcome.setdefault("refused", []).append(what)
        return None
    except fmq.LogFailed:
        outcome.setdefault("log_failed", []).append(what)
        return None
    outcome.setdefault("succeeded", []).append(what)
    return result


def child(data: str, segment_size: int) -> None:
    """Runs in its own process (its descriptor limit is lowered); prints a JSON summary."""
    broker = fmq.Broker.open(data, _config(segment_size))
    acked: list = []
    starved: dict = {}
    freed: dict = {}
    msg = fmq.Message
    # A transaction prepared while descriptors are plentiful, committed while starved.
    early_tx = broker.prepare([msg("orders", _body("early-tx"), queue_id=0)], "g")
    _fill_active_segment(broker, acked, "fill")
    end_before = broker.log.next_offset
    held = _exhaust_descriptors()
    _attempt(starved, "send", lambda: broker.send(msg("orders", _body("refused-send"))))
    _attempt(starved, "batch", lambda: broker.send_batch(
        [msg("orders", _body(f"refused-batch-{i}"), queue_id=i % 2) for i in range(5)]))
    _attempt(starved, "prepare", lambda: broker.prepare(
        [msg("orders", _body("refused-prepare"))], "g"))
    _attempt(starved, "commit", lambda: broker.commit(early_tx))
    starved["end_unchanged"] = broker.log.next_offset == end_before
    starved["log_failed"] = starved.get("log_failed", [])
    starved["failed_state"] = repr(broker.log.failed) if broker.log.failed else None
    for fd in held:
        os.close(fd)
    r = _attempt(freed, "send", lambda: broker.send(msg("orders", _body("after-send"),
                                                        queue_id=0)))
    if r is not None:
        acked.append(["after-send", r.queue_id, r.queue_offset])
    rs = _attempt(freed, "batch", lambda: broker.send_batch(
        [msg("orders", _body(f"after-batch-{i}"), queue_id=i % 2) for i in range(5)]))
    for i, r in enumerate(rs or ()):
        acked.append([f"after-batch-{i}", r.queue_id, r.queue_offset])
    _attempt(freed, "commit", lambda: broker.commit(early_tx))
    _fill_active_segment(broker, acked, "more")  # the log keeps rolling
    _attempt(freed, "send-after-roll", lambda: broker.send(msg("orders", _body("z"), queue_id=1)))
    broker.close()
    print(json.dumps({"starved": starved, "freed": freed, "acked": acked}))


def _run_child(data: str, segment_size: int) -> dict:
    code = (f"import sys; sys.path.insert(0, {ROOT!r}); "
            f"from tests.log.test_segment_unavailable import child; "
            f"child({data!r}, {segment_size})")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
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

    with fmq.Broker.open(data, _config(segment_size)) as b:
        assert b.wait_indexed(30)
        for mid, qid, qoff in out["acked"]:
            got = b.pull("orders", qid, qoff, 1)
            assert got and bytes(got[0].body) == _body(mid), f"acknowledged {mid} lost"
        everything = [bytes(m.body).rstrip(b".").decode()
                      for ms in b.all_messages(["orders"]).values() for m in ms]
        assert not [m for m in everything if m.startswith("refused")], \
            "a refused request was stored"
        assert "early-tx" in everything  # committed once descriptors were back, exactly once
        assert everything.count("early-tx") == 1
        assert b.open_transactions() == []


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
    config = _config(16 * 1024)
    batch = [fmq.Message("orders", _body(f"batch-{i}"), queue_id=i % 2) for i in range(12)]
    with fmq.Broker.open(data, config, io=io) as b:
        b.send(fmq.Message("orders", _body("first")))
        end = b.log.next_offset
        io.starved_after = 1  # the batch's first new segment can be made, its second not
        with pytest.raises(fmq.SegmentUnavailable) as refused:
            b.send_batch(batch)
        assert refused.value.retriable and "ulimit" in str(refused.value)
        assert b.log.next_offset == end and b.log.failed is None
        io.starved_after = None
        results = b.send_batch(batch)
        assert len({b.log.segment_for(r.offset).base for r in results}) >= 3
    with fmq.Broker.open(data, config) as b:
        assert b.wait_indexed(30)
        got = [bytes(m.body).rstrip(b".").decode()
               for ms in b.all_messages(["orders"]).values() for m in ms]
        assert sorted(got) == sorted(["first"] + [f"batch-{i}" for i in range(12)])


def test_unused_reserved_segment_is_removed_at_close(tmp_path):
    log = Log(str(tmp_path), 16 * 1024)
    log.start_at(0)
    with log.lock:
        log.reserve_locked([10_000, 10_000, 10_000])  # three segments, none used
    log.close()
    assert list_segments(str(tmp_path)) == []
