"""The in-sync set: a follower leaves it by byte lag or by silence and rejoins once it has
caught up; a sync acknowledgement waits for a report past its offset."""

from __future__ import annotations

import threading

import pytest

from fmq.errors import NotEnoughReplicas
from fmq.replication.insync import ReplicaSet
from fmq.server.ops.replication_ops import follower_name


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_follower_leaves_by_bytes_or_silence_and_rejoins():
    end = [1000]
    clock = Clock()
    replicas = ReplicaSet(lambda: end[0], 1, max_lag_bytes=500, max_lag_ms=1000, clock=clock)
    replicas.report("f1", "p", 1000)
    assert replicas.in_sync() == ["f1"]
    end[0] = 1600  # 600 bytes behind
    assert replicas.in_sync() == []
    with pytest.raises(NotEnoughReplicas):
        replicas.wait_replicated(1600)
    replicas.report("f1", "p", 1200)  # 400 behind: back in
    assert replicas.in_sync() == ["f1"]
    clock.now += 1.5  # silent longer than max_lag_ms
    assert replicas.in_sync() == []
    replicas.report("f1", "p", 1600)
    assert replicas.in_sync() == ["f1"]
    replicas.wait_replicated(1600)  # already there: returns at once
    assert replicas.describe()["not_enough_replicas"] == 1


def test_a_follower_far_behind_joins_only_once_it_has_caught_up():
    end = [50_000]
    clock = Clock()
    replicas = ReplicaSet(lambda: end[0], 1, max_lag_bytes=100_000, max_lag_ms=1000,
                          clock=clock)
    replicas.report("new", "p", 0)  # within max_lag_bytes, but it holds nothing yet
    assert replicas.in_sync() == []
    with pytest.raises(NotEnoughReplicas):
        replicas.wait_replicated(50_000)
    end[0] = 60_000  # writes go on while it copies
    replicas.report("new", "p", 50_000)  # everything there was at its last report
    assert replicas.in_sync() == ["new"]


def test_one_report_releases_a_waiting_acknowledgement():
    end = [4000]
    replicas = ReplicaSet(lambda: end[0], 2, max_lag_bytes=10_000, max_lag_ms=10_000)
    replicas.report("a", "p", 4000)
    replicas.report("b", "p", 4000)
    end[0] = 5000  # a flush the followers have not copied yet
    released = threading.Event()

    def wait() -> None:
        replicas.wait_replicated(5000)
        released.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    replicas.report("a", "p", 5000)
    assert not released.wait(0.2)  # min_insync 2: one follower is not enough
    replicas.report("b", "p", 5000)
    waiter.join(5)
    assert released.is_set()


def test_followers_listening_on_every_interface_are_named_by_their_host():
    assert follower_name("0.0.0.0:9877", "10.0.0.5:40112") == "10.0.0.5:9877"
    assert follower_name("[::]:9877", "10.0.0.6:40112") == "10.0.0.6:9877"
    assert follower_name("10.1.1.1:9877", "10.0.0.5:40112") == "10.1.1.1:9877"


def test_the_replicated_end_is_what_min_insync_followers_hold():
    """The high watermark: the min_insync-th highest durable offset reported (None until
    that many followers reported), whether or not each is in sync now."""
    replicas = ReplicaSet(lambda: 1000, 2, max_lag_bytes=10_000, max_lag_ms=10_000)
    assert replicas.replicated_end() is None
    replicas.report("a:1", "a:1", 300)
    assert replicas.replicated_end() is None  # one copy is not two
    replicas.report("b:1", "b:1", 100)
    replicas.report("c:1", "c:1", 200)
    assert replicas.replicated_end() == 200
    replicas.report("b:1", "b:1", 900)
    assert replicas.replicated_end() == 300
