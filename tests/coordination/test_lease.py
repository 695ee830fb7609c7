"""The primary's lease against a real etcd: one holder at a time, epochs that only grow, and
fencing that ends a holder's trust in its lease before etcd lets another node take it."""

from __future__ import annotations

import os
import time

import pytest

from fmq.coordination.coordinator_url import parse_coordinator
from fmq.coordination.lease import LeaderLease, LeaderRecord
from fmq.errors import ConfigError, CoordinatorUnavailable
from tests.etcdkit import ETCD, EtcdProcess

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")


@pytest.fixture
def etcd(tmp_path):
    server = EtcdProcess(str(tmp_path / "etcd")).start()
    yield server
    server.stop()


def lease(etcd: EtcdProcess, node: str, **kw) -> LeaderLease:
    kw.setdefault("ttl_s", 2)
    kw.setdefault("margin_s", 0.5)
    kw.setdefault("request_timeout_s", 1.0)
    return LeaderLease(etcd.url, "g1", node, f"127.0.0.1:{9000 + int(node[-1])}", **kw)


def test_one_holder_at_a_time_and_each_term_has_a_new_epoch(etcd):
    a, b = lease(etcd, "n1"), lease(etcd, "n2")
    assert a.leader() is None and a.current_epoch() == 0
    assert a.try_acquire() == LeaderRecord("n1", "127.0.0.1:9001", 1) and a.holds()
    assert b.try_acquire() is None and not b.holds()
    assert b.leader() == LeaderRecord("n1", "127.0.0.1:9001", 1)
    a.release()
    assert not a.holds() and b.leader() is None
    assert b.try_acquire() == LeaderRecord("n2", "127.0.0.1:9002", 2)
    b.release()
    # A node whose log already holds a later epoch (a manual promotion) moves past it.
    assert a.try_acquire(min_epoch=7).epoch == 8 and a.current_epoch() == 8
    a.release()


def test_refresh_keeps_the_lease_past_its_ttl(etcd):
    a, b = lease(etcd, "n1"), lease(etcd, "n2")
    a.try_acquire()
    end = time.monotonic() + 4  # twice the TTL
    while time.monotonic() < end:
        assert a.refresh() and a.holds()
        time.sleep(0.3)
    assert b.try_acquire() is None and b.leader().node == "n1"
    a.release()


def test_a_holder_that_stops_refreshing_distrusts_its_lease_before_another_node_takes_it(etcd):
    a, b = lease(etcd, "n1"), lease(etcd, "n2")
    a.try_acquire()
    a.refresh()
    deadline = time.monotonic() + 20
    taken_at = None
    while time.monotonic() < deadline:  # a is "paused": it never refreshes again
        if b.try_acquire() is not None:
            taken_at = time.monotonic()
            break
        time.sleep(0.05)
    assert taken_at is not None, "the lapsed lease was never taken over"
    assert not a.holds()
    # Fencing: a's own deadline had passed before b could take the key.
    assert a._valid_until < taken_at
    assert b.record.epoch == 2 and b.leader().node == "n2"
    assert not a.refresh()  # etcd says a's lease is gone: a drops it for good
    assert a.try_acquire() is None  # and cannot take it back while b holds it
    b.release()


def test_an_unreachable_etcd_ends_the_lease_at_its_deadline_with_a_clear_error(etcd):
    a = lease(etcd, "n1")
    a.try_acquire()
    etcd.pause()  # etcd stops answering: requests time out
    try:
        end = time.monotonic() + 10
        while a.holds() and time.monotonic() < end:
            a.refresh()  # fails, never extends the deadline
        assert not a.holds()
        with pytest.raises(CoordinatorUnavailable, match="could not read the leader key") as info:
            a.leader()
        assert info.value.retriable and etcd.url in str(info.value)
    finally:
        etcd.resume()


@pytest.mark.parametrize("url", ["127.0.0.1:2379", "etcd://", "etcd://host", "etcd://h:0",
                                 "etcd://h:99999", "http://h:2379", None])
def test_bad_coordinator_addresses_are_one_clear_error(url):
    with pytest.raises(ConfigError, match="etcd://HOST:PORT"):
        parse_coordinator(url)


def test_lease_settings_are_checked(etcd):
    with pytest.raises(ConfigError, match="at least 2 seconds"):
        lease(etcd, "n1", ttl_s=1)
    with pytest.raises(ConfigError, match="must stay below ttl_s"):
        lease(etcd, "n1", ttl_s=2, margin_s=1.5, request_timeout_s=1.0)
