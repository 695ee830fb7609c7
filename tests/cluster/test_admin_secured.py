"""Route changes in a cluster with users: ROUTE_CHANGE needs ``alter`` on the topic, and the
lag remove-group needs is asked of the group's primary with the caller's log-in (the
command's ``--user``; a node's ``follow_user``). A primary that refuses the caller leaves the
lag unknown, which refuses the removal: it never passes for "no lag"."""

from __future__ import annotations

import json

import pytest

from fmq.client import Client, Consumer, Producer
from fmq.coordination.routes import ClusterRoutes
from fmq.errors import AccessDenied
from fmq.protocol import Op
from tests.security.conftest import PASSWORD, add_rule_offline, add_user_offline
from tests.server.conftest import FAST
from tests.server.harness import ServerProcess, wait_until

from .conftest import CLUSTER, NEEDS_ETCD, fmq

pytestmark = NEEDS_ETCD

ADMIN = {"user": "admin", "password": PASSWORD}


@pytest.fixture
def secured(tmp_path, etcd, monkeypatch):
    """Groups g1 and g2 of cluster c1, one server each with users admin (everything), bob
    (may only produce to orders) and carol (may only consume reports); each node asks other
    primaries as admin."""
    monkeypatch.setenv("FMQ_PASSWORD", PASSWORD)
    monkeypatch.delenv("FMQ_USER", raising=False)
    password_file = tmp_path / "admin.password"
    password_file.write_text(PASSWORD + "\n")
    routes = ClusterRoutes(etcd.url, CLUSTER)
    nodes = {}
    try:
        for name in ("g1", "g2"):
            data_dir = str(tmp_path / name)
            for user in ("admin", "bob", "carol"):
                add_user_offline(data_dir, user)
            add_rule_offline(data_dir, "--principal", "admin", "--operation", "all",
                             "--cluster")
            add_rule_offline(data_dir, "--principal", "admin", "--operation", "all",
                             "--topic", "", "--prefix")
            add_rule_offline(data_dir, "--principal", "admin", "--operation", "all",
                             "--group", "", "--prefix")
            add_rule_offline(data_dir, "--principal", "bob", "--operation", "produce",
                             "--topic", "orders")
            add_rule_offline(data_dir, "--principal", "carol", "--operation", "consume",
                             "--topic", "reports")
            routes.register_group(name)
            config = {**FAST, "server": {**FAST["server"], "lease_ttl_s": 3,
                                         "follow_user": "admin",
                                         "follow_password_file": str(password_file)}}
            node = ServerProcess(data_dir, config, client_options=ADMIN, extra_args=(
                "--coordinator", etcd.url, "--cluster-name", CLUSTER, "--group", name))
            nodes[name] = node.start()
            wait_until(lambda n=name, a=node.address: routes.groups()[n].primary == a, 60,
                       f"{name}'s server to lead its group")
        yield routes, nodes
    finally:
        for node in nodes.values():
            node.kill()


def leave_lag(address: str) -> None:
    """Consumer group billing reads one message of orders' queue 0; one more follows."""
    with Producer(address, **ADMIN) as p:
        p.send("orders", b"read", queue_id=0)
    got: list = []
    with Consumer(address, "billing", ["orders"], **ADMIN) as c:
        wait_until(lambda: got.extend(c.poll(timeout=0.5)) or got, 60, "billing to read")
        c.commit()
    with Producer(address, **ADMIN) as p:
        p.send("orders", b"unread", queue_id=0)


def test_changes_and_lag_take_the_callers_log_in(secured, etcd):
    routes, nodes = secured
    g1, g2 = nodes["g1"].address, nodes["g2"].address
    on_etcd = ("--coordinator", etcd.url, "--cluster-name", CLUSTER)
    made = fmq("topic", "create", "orders", "--queues-per-group", "2", "--server", g2,
               "--user", "admin")
    assert made.code == 0, made.stderr
    leave_lag(g1)

    before = routes.get("orders")
    refused = fmq("topic", "drain", "orders", "--group", "g1", "--server", g2, "--user", "bob")
    assert refused.code == 1 and "alter on topic 'orders' is not allowed" in refused.stderr
    assert routes.get("orders") == before
    drained = fmq("topic", "drain", "orders", "--group", "g1", "--server", g2, "--user",
                  "admin")
    assert drained.code == 0, drained.stderr

    before = routes.get("orders")
    # Without a log-in g1's primary tells nothing: the lag is unknown, nothing is removed.
    unknown = fmq("topic", "remove-group", "orders", "--group", "g1", *on_etcd)
    assert unknown.code == 1 and "is unknown" in unknown.stderr, unknown.stderr
    # With the caller's log-in (the command) or the node's follow_user (ROUTE_CHANGE), the
    # lag is read and refuses the removal.
    for where in (on_etcd, ("--server", g2)):
        lag = fmq("topic", "remove-group", "orders", "--group", "g1", *where, "--user",
                  "admin")
        assert lag.code == 1
        assert "consumer group billing queue 0: 1 unread" in lag.stderr, lag.stderr
    assert routes.get("orders") == before

    status = fmq("cluster", "status", *on_etcd, "--user", "admin", "--json")
    assert status.code == 0, status.stderr
    assert all(g["reachable"] for g in status.json["groups"])
    assert [(r["group"], r["queue_id"], r["consumer_group"], r["lag"])
            for r in status.json["lag"] if r["lag"]] == [("g1", 0, "billing", 1)]


def test_a_route_is_created_by_route_only_for_a_user_who_may_produce(secured):
    """ROUTE of a topic without a route creates it (auto_create_topics), as a first send
    would: a consumer, who may describe the topic, gets AccessDenied and etcd keeps no
    route; a producer gets the route, over both groups."""
    routes, nodes = secured
    g1 = nodes["g1"].address
    with Client(g1, user="carol", password=PASSWORD, retries=0) as carol:
        with pytest.raises(AccessDenied, match="produce"):
            carol.call(Op.ROUTE, {"topic": "reports"})
    assert routes.get("reports") is None
    with Client(g1, user="bob", password=PASSWORD, retries=0) as bob:
        answer = json.loads(bob.call(Op.ROUTE, {"topic": "orders"})["json"])
    assert sorted(g["group"] for g in answer["groups"]) == ["g1", "g2"]
    assert routes.get("orders") is not None
