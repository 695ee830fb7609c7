"""``sync`` mode under a primary killed with SIGKILL mid-load: every send acknowledged
before the kill is on the follower's disk; with two followers and ``min_insync = 2`` an
acknowledgement needs both."""

from __future__ import annotations

import threading
import time

import pytest

from fmq.client import Producer
from fmq.errors import FMQError, NotEnoughReplicas

from .cluster import SMALL, record_on_disk, wait_in_sync

SYNC = {**SMALL, "ack_mode": "sync", "min_insync": 1, "max_lag_ms": 1000}


def test_every_send_acknowledged_before_a_primary_kill_is_on_the_follower(node):
    primary = node("primary", SYNC)
    follower = node("follower", {**SMALL, "follow": primary.address})
    wait_in_sync(primary)
    acked: list[tuple[int, bytes]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def work(n: int) -> None:
        with Producer(primary.address, retries=0, request_timeout=5) as p:
            i = 0
            while not stop.is_set():
                body = f"{n}-{i}".encode() * 10
                try:
                    result = p.send("t", body)
                except FMQError:
                    return  # the primary is gone: this send was never acknowledged
                with lock:
                    acked.append((result.offset, body))
                i += 1

    threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(acked) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    primary.kill()  # SIGKILL in the middle of the load
    stop.set()
    for t in threads:
        t.join(30)
    assert len(acked) >= 300
    follower.stop()
    for offset, body in acked:
        assert record_on_disk(follower, offset).body == body


def test_min_insync_two_needs_both_followers(node):
    primary = node("primary", {**SYNC, "min_insync": 2})
    one = node("one", {**SMALL, "follow": primary.address})
    two = node("two", {**SMALL, "follow": primary.address})
    wait_in_sync(primary, 2)
    with Producer(primary.address, retries=0) as p:
        result = p.send("t", b"on both")
        for f in (one, two):
            assert record_on_disk(f, result.offset).body == b"on both"
        two.kill()
        deadline = time.monotonic() + 20
        with pytest.raises(NotEnoughReplicas) as info:
            while time.monotonic() < deadline:
                p.send("t", b"maybe")
        assert (info.value.in_sync, info.value.min_insync) == (1, 2)
