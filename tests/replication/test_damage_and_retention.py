"""A bit flipped on the wire is caught by the follower's check and never written; a
follower behind the primary's retention refuses to start, telling the operator what to do."""

from __future__ import annotations

import os
import time

from fmq.client import Producer
from fmq.datadir import LOG_DIR
from fmq.errors import ReplicaBehindRetention
from fmq.message import Message

from .cluster import SMALL, assert_identical_up_to, segment_files, status, wait_caught_up
from .proxy import BitFlipProxy


def test_bit_flip_in_a_shipped_chunk_is_caught_and_fetched_again(node):
    primary = node("primary", SMALL)
    with Producer(primary.address) as p:
        p.send_batch([p_msg(i) for i in range(200)])
    proxy = BitFlipProxy(("127.0.0.1", primary.port))
    try:
        follower = node("follower", {**SMALL, "follow": proxy.address})
        end = wait_caught_up(follower, primary)
        assert proxy.flipped == 1
        assert status(follower)["rejected_chunks"] == 1
        # The damaged bytes never reached the disk: the copy is byte for byte the primary's.
        assert_identical_up_to(primary, follower, end)
        assert "failed its check and was not written" in follower.log()
    finally:
        proxy.close()


def p_msg(i: int) -> Message:
    return Message("t", f"message {i} ".encode() * 30)


def test_follower_behind_retention_refuses_with_a_clear_message(node):
    config = {**SMALL, "retention_bytes": 2 * SMALL["segment_size"],
              "retention_interval_ms": 100, "checkpoint_interval_ms": 100,
              # idempotent sends keep their segment for dedup_window_ms: not here
              "dedup_window_ms": 1}
    primary = node("primary", config)
    first_segment = os.path.join(primary.data_dir, LOG_DIR, f"{0:020d}.seg")
    with Producer(primary.address) as p:
        for _ in range(10):
            p.send_batch([p_msg(i) for i in range(100)])
    deadline = time.monotonic() + 20
    while os.path.exists(first_segment) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(first_segment)  # retention deleted the start of the log
    follower = node("follower", {**SMALL, "follow": primary.address}, start=False)
    try:
        follower.start()
    except RuntimeError:
        pass  # it may exit before it ever answers a ping
    assert follower.proc.wait(20) == 1
    text = follower.log()
    assert "primary's log starts at" in text and "fresh copy" in text
    assert "Traceback" not in text
    assert ReplicaBehindRetention.code == 83


def test_follower_applies_its_own_retention_without_writing(node):
    primary = node("primary", SMALL)
    follower = node("follower", {**SMALL, "follow": primary.address,
                                 "retention_bytes": 2 * SMALL["segment_size"],
                                 "retention_interval_ms": 100, "checkpoint_interval_ms": 100,
                                 # It keeps the dedup window of the idempotent sends it
                                 # copies (for a promotion), which holds its checkpoint
                                 # and retention for that long, as on a primary.
                                 "dedup_window_ms": 200})
    with Producer(primary.address) as p:
        for _ in range(10):
            p.send_batch([p_msg(i) for i in range(100)])
    end = wait_caught_up(follower, primary)
    first_segment = os.path.join(follower.data_dir, LOG_DIR, f"{0:020d}.seg")
    deadline = time.monotonic() + 20
    while os.path.exists(first_segment) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(first_segment)
    # What it kept is still byte for byte the primary's; it wrote nothing of its own.
    mine, theirs = segment_files(primary), segment_files(follower)
    assert theirs and set(theirs) < set(mine)
    for name, data in theirs.items():
        base = int(name.split(".")[0])
        assert data[:end - base] == mine[name][:end - base]
    with Producer(primary.address) as p:
        p.send("t", b"after retention")
    assert wait_caught_up(follower, primary) > end
