"""Routes in a real etcd: compare-and-swap changes that all land, a stale revision refused
and retried, a follower that sees changes through its watch, after its watch hangs or is
cut (the periodic re-read), and that starts from its cache file with etcd stopped."""

from __future__ import annotations

import os
import threading

import pytest

from fmq.coordination.lease import LeaderLease
from fmq.coordination.route_follower import RouteFollower, newer
from fmq.coordination.routes import ClusterRoutes, RouteSnapshot
from fmq.errors import (
    CoordinatorUnavailable,
    InvalidArgument,
    RouteConflict,
    RouteHasLag,
    UnknownBrokerGroup,
    UnknownTopic,
)
from fmq.topic_route import READ_ONLY, QueueRef, expand, new_route
from tests.etcdkit import ETCD, EtcdProcess
from tests.server.harness import wait_until
from tests.stall_proxy import StallProxy

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")


@pytest.fixture
def etcd(tmp_path):
    server = EtcdProcess(str(tmp_path / "etcd")).start()
    yield server
    server.stop()


def start_group(etcd: EtcdProcess, cluster: ClusterRoutes, group: str, port: int) -> None:
    """A registered group whose primary holds the real leader lease (long enough for one
    test)."""
    cluster.register_group(group)
    lease = LeaderLease(etcd.url, group, "n1", f"127.0.0.1:{port}", ttl_s=120)
    assert lease.try_acquire() is not None


@pytest.fixture
def cluster(etcd) -> ClusterRoutes:
    routes = ClusterRoutes(etcd.url, "c1")
    for i, group in enumerate(("a", "b")):
        start_group(etcd, routes, group, 9000 + i)
    return routes


def test_no_group_with_a_primary_no_route_by_default(etcd):
    cluster = ClusterRoutes(etcd.url, "c1")
    cluster.register_group("a")  # registered, no primary
    with pytest.raises(RouteConflict, match="takes writes now"):
        cluster.create("orders", 2)
    assert cluster.get("orders") is None
    # A group named explicitly may lack a primary now: its producers wait for one.
    assert cluster.create("orders", 2, groups=["a"]).groups == ("a",)


def test_create_reads_back_with_its_version_and_bad_input_changes_nothing(etcd, cluster):
    groups = cluster.groups()
    assert groups["a"].primary == "127.0.0.1:9000" and groups["a"].writable
    cluster.register_group("c")  # no primary yet: not chosen by default
    route = cluster.create("orders", 4)
    assert route.groups == ("a", "b") and route.version > 0
    assert cluster.get("orders") == route
    with pytest.raises(RouteConflict, match="has a route already"):
        cluster.create("orders", 4)
    with pytest.raises(UnknownBrokerGroup, match="not part of cluster c1"):
        cluster.create("other", 2, groups=["a", "zz"])
    with pytest.raises(InvalidArgument, match="1..65535"):
        cluster.create("other", 10**6, groups=["a"])
    with pytest.raises(InvalidArgument, match="FMQ's own"):
        cluster.create("%DLQ%billing", 1)
    with pytest.raises(UnknownTopic):
        cluster.drain("nothing", "a")
    with pytest.raises(UnknownBrokerGroup):
        cluster.expand("orders", "zz")
    assert cluster.get("other") is None and cluster.get("orders") == route
    # Another cluster in the same etcd has routes of its own.
    assert ClusterRoutes(etcd.url, "c2").get("orders") is None
    assert not cluster.delete("orders", version=route.version - 1)
    assert cluster.delete("orders", version=route.version)
    assert cluster.get("orders") is None


def test_expand_drain_and_remove_group_through_etcd(etcd, cluster):
    start_group(etcd, cluster, "c", 9002)
    cluster.create("orders", 2, groups=["a", "b"])
    grown = cluster.expand("orders", "c")
    assert [(i, q) for i, q in grown.queues()][-1] == (5, QueueRef("c", 1))
    drained = cluster.drain("orders", "a")
    assert drained.entry("a").permission == READ_ONLY and drained.version > grown.version
    with pytest.raises(RouteHasLag, match="billing: 7 unread"):
        cluster.remove_group("orders", "a", {"billing": 7})
    assert cluster.get("orders") == drained  # refused: nothing written
    removed = cluster.remove_group("orders", "a", {"billing": 0})
    assert removed.groups == ("b", "c") and cluster.get("orders") == removed


def test_concurrent_changes_from_two_threads_all_land(etcd, cluster):
    names = [f"{t}{i}" for t in "xy" for i in range(8)]
    for i, name in enumerate(names):
        start_group(etcd, cluster, name, 9100 + i)
    cluster.create("orders", 1, groups=["a"])
    errors: list[BaseException] = []

    def grow(prefix: str) -> None:
        mine = ClusterRoutes(etcd.url, "c1")  # a client of its own, as another admin's
        try:
            for name in names:
                if name.startswith(prefix):
                    mine.expand("orders", name, 2)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=grow, args=(p,)) for p in "xy"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    route = cluster.get("orders")
    assert sorted(route.groups) == sorted(["a", *names])
    indices = [i for i, _ in route.queues()]
    assert len(indices) == len(set(indices)) == 1 + 2 * len(names)


def test_a_stale_revision_is_refused_and_the_change_is_retried(etcd, cluster):
    start_group(etcd, cluster, "c", 9002)
    first = cluster.create("orders", 1, groups=["a"])
    other_admin = ClusterRoutes(etcd.url, "c1")
    seen_versions = []

    def add_c(route):
        seen_versions.append(route.version)
        if len(seen_versions) == 1:  # another writer gets in between our read and write
            other_admin.expand("orders", "b", 1)
        return expand(route, "c", 1)

    assert cluster._swap(expand(first, "b", 1), first.version - 1) == 0  # stale: refused
    final = cluster.change("orders", add_c)
    assert len(seen_versions) == 2 and seen_versions[0] == first.version
    assert seen_versions[1] > first.version  # the retry read the other writer's route
    assert final.groups == ("a", "b", "c") and cluster.get("orders") == final


def test_the_compare_and_swap_loop_is_bounded(etcd, cluster):
    cluster.create("orders", 1, groups=["a", "b"])
    other_admin = ClusterRoutes(etcd.url, "c1")
    tries = []

    def always_overtaken(route):
        tries.append(route.version)
        # Another writer changes the route between every read and write of ours.
        if route.entry("b").writable:
            other_admin.drain("orders", "b")
        else:
            other_admin.reopen("orders", "b")
        return expand(route, "c", 1)

    with pytest.raises(CoordinatorUnavailable, match="changed 50 times"):
        cluster.change("orders", always_overtaken)
    assert len(tries) == 50 and len(set(tries)) == 50
    assert cluster.get("orders").entry("c") is None


def test_the_follower_sees_a_change_through_its_watch(tmp_path, etcd, cluster):
    cluster.create("orders", 2, groups=["a"])
    # A re-read only every 10 minutes: within the bound below only the watch can tell it.
    follower = RouteFollower(ClusterRoutes(etcd.url, "c1"), str(tmp_path), resync_s=600)
    follower.start()
    try:
        wait_until(lambda: follower.route("orders") is not None, 30, "the first read")
        changed = cluster.expand("orders", "b")
        wait_until(lambda: follower.route("orders") == changed, 30, "the watch to tell")
    finally:
        follower.stop()


@pytest.mark.parametrize("failure", ["stall", "cut"])
def test_the_follower_sees_a_change_after_its_watch_hangs_or_is_cut(
        tmp_path, etcd, cluster, failure):
    cluster.create("orders", 2, groups=["a"])
    proxy = StallProxy(etcd.client_port)
    follower = RouteFollower(ClusterRoutes(proxy.url, "c1", request_timeout_s=1.0),
                             str(tmp_path), resync_s=2)
    follower.start()
    try:
        wait_until(lambda: follower.route("orders") is not None, 30, "the first read")
        if failure == "stall":
            # Silence the connections now open (the watch among them); the watch never
            # tells of the change, only the periodic re-read, on a new connection, can.
            assert proxy.stall() >= 1
        else:
            proxy.cut()
        changed = cluster.expand("orders", "b")
        wait_until(lambda: follower.route("orders") == changed, 60, "the re-read")
    finally:
        follower.stop()
        proxy.close()


def test_the_cache_file_lets_a_follower_start_with_etcd_stopped(tmp_path, etcd, cluster):
    route = cluster.create("orders", 3)
    data_dir = str(tmp_path / "node")
    os.makedirs(data_dir)
    follower = RouteFollower(ClusterRoutes(etcd.url, "c1"), data_dir)
    assert follower.sync_once()
    assert os.path.exists(os.path.join(data_dir, "routes.json"))
    etcd.stop()
    cold = RouteFollower(ClusterRoutes(etcd.url, "c1", request_timeout_s=0.5), data_dir,
                         resync_s=1).start()
    try:
        assert cold.route("orders") == route
        assert cold.snapshot.groups["a"].primary == "127.0.0.1:9000"
        with pytest.raises(CoordinatorUnavailable):
            cold.sync_once()
        assert cold.route("orders") == route  # etcd down: the copy stays
    finally:
        cold.stop()
    # Another cluster's copy is not taken.
    assert RouteFollower(ClusterRoutes(etcd.url, "c2"), data_dir).route("orders") is None


def test_a_new_etcd_counting_revisions_anew_replaces_the_copy(tmp_path, etcd, cluster):
    """Within one etcd the copy never goes backwards; a new etcd (another cluster id, not
    a restored backup) starts its revisions at 1, and its routes are taken, not ignored."""
    for _ in range(20):  # move the old etcd's revision well past the new one's
        cluster.register_group("a")
        cluster.groups()
        ClusterRoutes(etcd.url, "c1").register_group("b")
        cluster._txn("bump", {"compare": [], "success": [{"request_put": {
            "key": "L2J1bXA=", "value": "eA=="}}], "failure": []})
    cluster.create("orders", 2, groups=["a"])
    data_dir = str(tmp_path / "node")
    os.makedirs(data_dir)
    old = RouteFollower(ClusterRoutes(etcd.url, "c1"), data_dir)
    assert old.sync_once()
    etcd.stop()
    fresh = EtcdProcess(str(tmp_path / "etcd2")).start()
    try:
        routes = ClusterRoutes(fresh.url, "c1")
        start_group(fresh, routes, "z", 9009)
        created = routes.create("orders", 1)
        assert created.version < old.route("orders").version
        follower = RouteFollower(routes, data_dir)
        assert follower.route("orders").groups == ("a",)  # the cached copy, until a read
        assert follower.sync_once()
        assert follower.route("orders") == created
    finally:
        fresh.stop()


def test_a_damaged_cache_file_is_ignored_not_fatal(tmp_path, etcd):
    (tmp_path / "routes.json").write_text("{not json")
    follower = RouteFollower(ClusterRoutes(etcd.url, "c1"), str(tmp_path))
    assert follower.snapshot == RouteSnapshot(0)


def test_the_copy_never_goes_backwards():
    old = new_route("orders", ["a"], 2)
    v5 = RouteSnapshot(5, {"orders": old.__class__(old.topic, old.entries, old.next_index, 5)})
    v9 = RouteSnapshot(9, {"orders": expand(v5.routes["orders"], "b", 1)})
    assert newer(v9, v5) == (v9, False)  # an older read: ignored
    assert newer(v5, v9) == (v9, True)
    # A topic whose stored route cannot be read keeps the copy's route.
    damaged = RouteSnapshot(12, {}, {}, {"orders": "not JSON"})
    assert newer(v9, damaged)[0].routes == v9.routes
    # Another etcd (another cluster id) is taken whole, whatever its revision.
    other = RouteSnapshot(2, {}, {}, {}, "other-etcd")
    assert newer(RouteSnapshot(9, v9.routes, {}, {}, "first-etcd"), other) == (other, True)
    # A newer revision with nothing changed moves the revision, not the routes.
    assert newer(v9, RouteSnapshot(15, v9.routes)) == (RouteSnapshot(15, v9.routes), False)
