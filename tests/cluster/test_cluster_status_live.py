"""``fmq cluster status --server`` against a live node of a cluster: a real etcd, two broker
groups of one real ``fmq server`` each, a topic routed over both, messages sent by a routing
producer and a consumer group that has read part of one group's queues. The node asked
answers ROUTE for every route from its copy of etcd and the command asks each group's
primary (GROUPS) for the lag, so the answer names both groups, their primaries, the topic's
queues and the lag, field by field."""

from __future__ import annotations

import pytest

from fmq.client import Producer
from fmq.coordination.routes import ClusterRoutes
from tests.server.conftest import FAST
from tests.server.harness import ServerProcess, wait_until

from .conftest import CLUSTER, NEEDS_ETCD, fmq
from .kit import read_and_commit, role

pytestmark = NEEDS_ETCD

CONFIG = {**FAST, "server": {**FAST["server"], "lease_ttl_s": 3, "route_resync_ms": 1000}}


@pytest.fixture
def nodes(tmp_path, etcd):
    """Broker groups g1 and g2 of cluster c1, one server each, each its group's primary and
    registered in etcd with its address."""
    routes = ClusterRoutes(etcd.url, CLUSTER)
    started: dict[str, ServerProcess] = {}
    try:
        for name in ("g1", "g2"):
            started[name] = ServerProcess(
                str(tmp_path / name), CONFIG,
                extra_args=("--coordinator", etcd.url, "--cluster-name", CLUSTER,
                            "--group", name, "--node", f"{name}-n1")).start()
        for name, node in started.items():
            wait_until(lambda n=name, s=node: role(s) == "primary"
                       and routes.groups().get(n) is not None
                       and routes.groups()[n].primary == s.address,
                       60, f"{name}'s server to lead its group")
        yield started
    finally:
        for node in started.values():
            node.kill()


def send(address: str, per_index: dict[int, int]) -> None:
    """``n`` messages to each global index of orders, through the routing producer."""
    with Producer(address, request_timeout=20) as p:
        for index, n in per_index.items():
            for i in range(n):
                result = p.send("orders", f"m{index}-{i}".encode(), queue_id=index)
                assert result.group == ("g1" if index < 2 else "g2"), result



def test_status_through_a_live_node_shows_groups_route_and_lag(nodes):
    g1, g2 = nodes["g1"].address, nodes["g2"].address
    made = fmq("topic", "create", "orders", "--queues-per-group", "2", "--server", g1)
    assert made.code == 0, made.stderr

    # global indices 0, 1 are g1's queues 0, 1; 2, 3 are g2's queues 0, 1
    send(g1, {0: 3, 1: 1, 2: 2, 3: 1})
    read_and_commit(g2, 7, "earliest")  # billing (a consumer of both groups) read all 7 ...
    send(g2, {2: 2})  # ... and not these two, in g2's queue 0

    status = fmq("cluster", "status", "--server", g1, "--json")
    assert status.code == 0, status.stderr
    s = status.json
    assert s["cluster"] == CLUSTER
    assert s["revision"] > 0
    assert s["damaged"] == {}
    by_group = {g["group"]: g for g in s["groups"]}
    assert sorted(by_group) == ["g1", "g2"]
    for name, address in (("g1", g1), ("g2", g2)):
        g = by_group[name]
        assert g["primary"] == address
        assert g["epoch"] >= 1
        assert g["open_for_writes"] is True
        assert g["registered"] is True
        assert g["reachable"] is True
        assert g["error"] == ""
    assert len(s["routes"]) == 1
    orders = s["routes"][0]
    assert orders["topic"] == "orders"
    assert orders["version"] > 0
    assert orders["groups"] == [
        {"group": "g1", "queues": 2, "permission": "rw", "base": 0, "last_index": 1},
        {"group": "g2", "queues": 2, "permission": "rw", "base": 2, "last_index": 3}]
    billing = sorted((r for r in s["lag"] if r["consumer_group"] == "billing"),
                     key=lambda r: r["global_index"])
    assert billing == [
        {"group": "g1", "topic": "orders", "queue_id": 0, "global_index": 0,
         "consumer_group": "billing", "committed": 3, "next_offset": 3, "lag": 0},
        {"group": "g1", "topic": "orders", "queue_id": 1, "global_index": 1,
         "consumer_group": "billing", "committed": 1, "next_offset": 1, "lag": 0},
        {"group": "g2", "topic": "orders", "queue_id": 0, "global_index": 2,
         "consumer_group": "billing", "committed": 2, "next_offset": 4, "lag": 2},
        {"group": "g2", "topic": "orders", "queue_id": 1, "global_index": 3,
         "consumer_group": "billing", "committed": 1, "next_offset": 1, "lag": 0}]

    # The same answer through the other group's node, and as the table.
    other = fmq("cluster", "status", "--server", g2, "--json")
    assert other.code == 0, other.stderr
    assert other.json["routes"] == s["routes"]
    assert sorted(r["lag"] for r in other.json["lag"]
                  if r["consumer_group"] == "billing") == [0, 0, 0, 2]
    table = fmq("cluster", "status", "--server", g1)
    assert table.code == 0, table.stderr
    lines = {line.split()[0]: line for line in table.stdout.splitlines() if line.strip()}
    assert g1 in lines["g1"] and g2 in lines["g2"]
    assert "orders" in lines["g2"] and "billing 2" in lines["g2"]
