"""``fmq topic create --queues-per-group | expand | drain | reopen | remove-group`` and
``fmq cluster status`` against a real etcd (``--coordinator``): each change read back from
etcd, and every bad input refused with a message naming the problem and the stored route
unchanged."""

from __future__ import annotations

import pytest

from fmq.coordination.routes import ClusterRoutes
from fmq.topic_route import READ_ONLY, READ_WRITE
from tests.etcdkit import EtcdProcess

from .conftest import CLUSTER, NEEDS_ETCD, fmq, registered_group, unused_address

pytestmark = NEEDS_ETCD


@pytest.fixture
def cluster(etcd):
    """Groups g1 and g2 with primaries (addresses where nothing answers), g3 without one."""
    routes = ClusterRoutes(etcd.url, CLUSTER)
    primaries = {"g1": unused_address(), "g2": unused_address()}
    for group, primary in primaries.items():
        registered_group(etcd, routes, group, primary)
    registered_group(etcd, routes, "g3", None)
    return etcd, routes, primaries


@pytest.fixture(scope="module")
def drained(tmp_path_factory):
    """One etcd for the refusals (none of them writes): topic orders over g1 (drained) and
    g2, and g3 without a primary."""
    etcd = EtcdProcess(str(tmp_path_factory.mktemp("etcd") / "etcd")).start()
    try:
        routes = ClusterRoutes(etcd.url, CLUSTER)
        for group, primary in (("g1", unused_address()), ("g2", unused_address()),
                               ("g3", None)):
            registered_group(etcd, routes, group, primary)
        routes.create("orders", 2, ["g1", "g2"])
        routes.drain("orders", "g1")
        yield etcd, routes
    finally:
        etcd.stop()


def at(etcd) -> tuple[str, ...]:
    return ("--coordinator", etcd.url, "--cluster-name", CLUSTER)


def test_create_expand_drain_reopen_remove_read_back_from_etcd(cluster):
    etcd, routes, primaries = cluster
    made = fmq("topic", "create", "orders", "--queues-per-group", "2", *at(etcd), "--json")
    assert made.code == 0, made.stderr
    # Every group that takes writes now (g3 has no primary), never silently one.
    stored = routes.get("orders")
    assert stored.groups == ("g1", "g2")
    answer = made.json
    assert answer["cluster"] == CLUSTER and answer["topic"] == "orders"
    assert answer["version"] == stored.version > 0
    assert answer["groups"] == [
        {"group": "g1", "queues": 2, "permission": "rw", "base": 0,
         "primary": primaries["g1"], "epoch": answer["groups"][0]["epoch"],
         "open_for_writes": True},
        {"group": "g2", "queues": 2, "permission": "rw", "base": 2,
         "primary": primaries["g2"], "epoch": answer["groups"][1]["epoch"],
         "open_for_writes": True}]
    assert all(g["epoch"] >= 1 for g in answer["groups"])

    # --groups names them (g3 without a primary may be named: its producers wait for one).
    only = fmq("topic", "create", "audit", "--queues-per-group", "3", "--groups", "g3",
               *at(etcd))
    assert only.code == 0, only.stderr
    assert "topic audit" in only.stdout and "g3" in only.stdout
    assert routes.get("audit").groups == ("g3",)

    grown = fmq("topic", "expand", "orders", "--group", "g3", "--queues", "4", *at(etcd),
                "--json")
    assert grown.code == 0, grown.stderr
    e3 = routes.get("orders").entry("g3")
    assert (e3.queues, e3.base, e3.permission) == (4, 4, READ_WRITE)
    assert grown.json["groups"][2] == {"group": "g3", "queues": 4, "permission": "rw",
                                       "base": 4, "primary": "", "epoch": 0,
                                       "open_for_writes": True}

    drained = fmq("topic", "drain", "orders", "--group", "g1", *at(etcd))
    assert drained.code == 0, drained.stderr
    assert "read-only" in drained.stdout
    assert routes.get("orders").entry("g1").permission == READ_ONLY
    reopened = fmq("topic", "reopen", "orders", "--group", "g1", *at(etcd))
    assert reopened.code == 0, reopened.stderr
    assert routes.get("orders").entry("g1").permission == READ_WRITE
    assert fmq("topic", "drain", "orders", "--group", "g1", *at(etcd)).code == 0

    # g1's primary does not answer: its consumer groups' lag is unknown, so no removal...
    before = routes.get("orders")
    refused = fmq("topic", "remove-group", "orders", "--group", "g1", *at(etcd))
    assert refused.code == 1
    assert "unknown" in refused.stderr and primaries["g1"] in refused.stderr
    assert "--force" in refused.stderr
    assert routes.get("orders") == before
    # ... unless the operator forces it. Its indices are never given out again.
    forced = fmq("topic", "remove-group", "orders", "--group", "g1", "--force", *at(etcd),
                 "--json")
    assert forced.code == 0, forced.stderr
    after = routes.get("orders")
    assert after.groups == ("g2", "g3") and after.next_index == 8
    assert [g["group"] for g in forced.json["groups"]] == ["g2", "g3"]


def test_status_shows_every_group_its_primary_topics_and_queues(cluster):
    etcd, routes, primaries = cluster
    assert fmq("topic", "create", "orders", "--queues-per-group", "2", *at(etcd)).code == 0
    assert fmq("topic", "drain", "orders", "--group", "g2", *at(etcd)).code == 0
    shown = fmq("cluster", "status", *at(etcd), "--json")
    assert shown.code == 0, shown.stderr
    s = shown.json
    assert s["cluster"] == CLUSTER and s["revision"] >= routes.get("orders").version
    groups = {g["group"]: g for g in s["groups"]}
    assert sorted(groups) == ["g1", "g2", "g3"]
    for name in ("g1", "g2"):
        g = groups[name]
        assert g["primary"] == primaries[name] and g["epoch"] >= 1
        assert g["open_for_writes"] and g["registered"]
        assert not g["reachable"] and g["error"]  # nothing listens there
    assert groups["g3"]["primary"] == "" and not groups["g3"]["reachable"]
    assert s["routes"] == [{"topic": "orders", "version": routes.get("orders").version,
                            "groups": [
                                {"group": "g1", "queues": 2, "permission": "rw", "base": 0,
                                 "last_index": 1},
                                {"group": "g2", "queues": 2, "permission": "ro", "base": 2,
                                 "last_index": 3}]}]
    assert s["lag"] == [] and s["damaged"] == {}

    table = fmq("cluster", "status", *at(etcd))
    assert table.code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "cluster c1: 3 broker groups, 1 routed topic"
    assert lines[1].split()[:5] == ["GROUP", "PRIMARY", "EPOCH", "WRITES", "TOPIC"]
    g1 = next(line for line in lines if line.startswith("g1 "))
    assert primaries["g1"] in g1 and "orders" in g1 and "0..1" in g1 and "read-write" in g1
    assert "unknown" in g1  # its lag: the primary did not answer
    g2 = next(line for line in lines if line.startswith("g2 "))
    assert "2..3" in g2 and "read-only" in g2
    assert "did not answer" in table.stdout


@pytest.mark.parametrize("args, problem", [
    (("create", "fresh", "--queues-per-group", "0"), "0 is not in the range 1<=x<=65535"),
    (("create", "fresh", "--queues-per-group", "1000000"), "1000000 is not in the range"),
    (("create", "fresh", "--queues-per-group", "2", "--groups", "g1,zz"),
     "broker group zz is not part of cluster c1 (its groups: g1, g2, g3)"),
    (("create", "%DLQ%billing", "--queues-per-group", "2"), "is one of FMQ's own"),
    (("create", "orders", "--queues-per-group", "2"), "has a route already"),
    (("create", "fresh", "--queues-per-group", "2", "--queues", "4"),
     "--queues and the retention and size settings are a node's"),
    (("expand", "nosuch", "--group", "g3"), "topic nosuch does not exist"),
    (("drain", "nosuch", "--group", "g1"), "topic nosuch does not exist"),
    (("remove-group", "nosuch", "--group", "g1"), "topic nosuch does not exist"),
    (("expand", "orders", "--group", "zz"), "broker group zz is not part of cluster c1"),
    (("drain", "orders", "--group", "zz"), "broker group zz is not part of cluster c1"),
    (("reopen", "orders", "--group", "zz"), "broker group zz is not part of cluster c1"),
    (("remove-group", "orders", "--group", "zz"), "broker group zz is not part of cluster"),
    (("expand", "orders", "--group", "g1"), "g1 holds queues of it already"),
    (("expand", "orders", "--group", "g3", "--queues", "0"), "0 is not in the range"),
    (("drain", "orders", "--group", "g3"), "g3 holds no queues of it"),
    (("remove-group", "orders", "--group", "g2"), "still takes its writes; drain it first"),
    (("expand", "orders", "--group", "bad/name"), "must be 1..127 characters"),
])
def test_bad_input_is_refused_and_changes_nothing(drained, args, problem):
    etcd, routes = drained
    before = routes.snapshot()
    done = fmq("topic", *args, *at(etcd))
    assert done.code != 0
    assert problem in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    after = routes.snapshot()
    assert after.routes == before.routes and after.groups == before.groups
    assert after.revision == before.revision  # nothing at all was written


def test_the_last_writable_group_is_not_drained(cluster):
    etcd, routes, _ = cluster
    assert fmq("topic", "create", "orders", "--queues-per-group", "1", "--groups", "g1,g2",
               *at(etcd)).code == 0
    assert fmq("topic", "drain", "orders", "--group", "g1", *at(etcd)).code == 0
    before = routes.get("orders")
    last = fmq("topic", "drain", "orders", "--group", "g2", *at(etcd))
    assert last.code == 1 and "last that takes its writes" in last.stderr
    assert routes.get("orders") == before


@pytest.mark.parametrize("args", [
    ("topic", "create", "t", "--queues-per-group", "2"),
    ("topic", "expand", "t", "--group", "g1"),
    ("topic", "drain", "t", "--group", "g1"),
    ("topic", "reopen", "t", "--group", "g1"),
    ("topic", "remove-group", "t", "--group", "g1"),
    ("cluster", "status"),
])
def test_exactly_one_of_coordinator_and_server(cluster, args, monkeypatch):
    etcd, routes, _ = cluster
    monkeypatch.delenv("FMQ_SERVER", raising=False)
    before = routes.snapshot().revision
    both = fmq(*args, "--coordinator", etcd.url, "--server", "127.0.0.1:1")
    assert both.code == 2 and "exactly one of --coordinator" in both.stderr
    assert "not both" in both.stderr
    neither = fmq(*args)
    assert neither.code == 2 and "exactly one of --coordinator" in neither.stderr
    assert routes.snapshot().revision == before


def test_node_local_create_keeps_its_meaning(cluster):
    etcd, _, _ = cluster
    # Cluster options without --queues-per-group are a mistake, not a node-local create.
    mixed = fmq("topic", "create", "t", "--groups", "g1", "--server", "127.0.0.1:1")
    assert mixed.code == 2 and "give --queues-per-group too" in mixed.stderr
    mixed = fmq("topic", "create", "t", *at(etcd))
    assert mixed.code == 2 and "give --queues-per-group too" in mixed.stderr
