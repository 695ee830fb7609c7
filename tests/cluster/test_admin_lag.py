"""remove-group asks the group's primary how far its consumer groups have read: two real
broker groups (one ``fmq server`` each, elected through a real etcd), a consumer group
left with unread messages in g1's queues, and the route changes made through etcd
(``--coordinator``) and through a node (``--server``: ROUTE_CHANGE)."""

from __future__ import annotations

import json
import re

import pytest

from fmq.client import Client, Producer
from fmq.coordination.routes import ClusterRoutes
from fmq.errors import FMQError, InvalidArgument
from fmq.message import Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire
from tests.server.conftest import FAST
from tests.server.harness import ServerProcess, wait_until

from .conftest import CLUSTER, NEEDS_ETCD, fmq
from .kit import read_and_commit

pytestmark = NEEDS_ETCD


@pytest.fixture
def groups(tmp_path, etcd):
    """Broker groups g1 and g2 of cluster c1, one server each, each its group's primary."""
    routes = ClusterRoutes(etcd.url, CLUSTER)
    nodes = {}
    try:
        for name in ("g1", "g2"):
            routes.register_group(name)
            node = ServerProcess(str(tmp_path / name),
                                 {**FAST, "server": {**FAST["server"], "lease_ttl_s": 3}},
                                 extra_args=("--coordinator", etcd.url, "--cluster-name",
                                             CLUSTER, "--group", name, "--node", name))
            nodes[name] = node.start()
        for name, node in nodes.items():
            wait_until(lambda n=name, a=node.address: routes.groups()[n].primary == a
                       and role(a) == "primary", 60, f"{name}'s server to lead its group")
            with Client(node.address) as c:  # two local queues, as the route gives g1
                c.create_topic("orders", 2)
        yield routes, nodes
    finally:
        for node in nodes.values():
            node.kill()


def role(address: str) -> str:
    try:
        with Client(address, retries=1, connect_timeout=2) as c:
            return json.loads(c.call(Op.REPL_STATUS, {})["json"])["role"]
    except (FMQError, OSError):
        return "down"


def send(address: str, per_queue: dict[int, int]) -> None:
    with Producer(address) as p:
        for queue_id, n in per_queue.items():
            for i in range(n):
                p.send("orders", f"m{i}".encode(), queue_id=queue_id)



def lag_of(status: dict, group: str) -> dict[int, int]:
    return {r["queue_id"]: r["lag"] for r in status["lag"]
            if r["group"] == group and r["consumer_group"] == "billing"}


def test_remove_group_waits_for_the_consumer_groups_lag(groups, etcd):
    routes, nodes = groups
    g1, g2 = nodes["g1"].address, nodes["g2"].address
    on_etcd = ("--coordinator", etcd.url, "--cluster-name", CLUSTER)

    # Created through a node: ROUTE_CHANGE writes it to etcd, on every writable group.
    made = fmq("topic", "create", "orders", "--queues-per-group", "2", "--server", g2,
               "--json")
    assert made.code == 0, made.stderr
    assert [(g["group"], g["primary"]) for g in made.json["groups"]] == [("g1", g1),
                                                                         ("g2", g2)]
    assert made.json["version"] == routes.get("orders").version

    send(g1, {0: 2, 1: 2})
    read_and_commit(g1, 4, "committed")
    send(g1, {0: 2, 1: 1})  # billing has not read these: lag 2 in queue 0, 1 in queue 1

    status = fmq("cluster", "status", *on_etcd, "--json")
    assert status.code == 0, status.stderr
    s = status.json
    assert {g["group"]: (g["primary"], g["reachable"]) for g in s["groups"]} == {
        "g1": (g1, True), "g2": (g2, True)}
    assert lag_of(s, "g1") == {0: 2, 1: 1}
    row = next(r for r in s["lag"] if r["group"] == "g1" and r["queue_id"] == 0)
    assert row == {"group": "g1", "topic": "orders", "queue_id": 0, "global_index": 0,
                   "consumer_group": "billing", "committed": 2, "next_offset": 4, "lag": 2}
    table = fmq("cluster", "status", *on_etcd)
    g1_line = next(line for line in table.stdout.splitlines() if line.startswith("g1 "))
    assert "orders" in g1_line and "billing 3" in g1_line

    drained = fmq("topic", "drain", "orders", "--group", "g1", "--server", g1)
    assert drained.code == 0, drained.stderr
    before = routes.get("orders")
    for where in (on_etcd, ("--server", g2), ("--server", g1)):
        refused = fmq("topic", "remove-group", "orders", "--group", "g1", *where)
        assert refused.code == 1, refused.stdout
        assert ("consumer group billing queue 0: 2 unread, consumer group billing queue 1: "
                "1 unread" in refused.stderr), refused.stderr
        assert "--force" in refused.stderr
        assert routes.get("orders") == before

    read_and_commit(g1, 3, "committed")
    removed = fmq("topic", "remove-group", "orders", "--group", "g1", "--server", g1,
                  "--json")
    assert removed.code == 0, removed.stderr
    assert [g["group"] for g in removed.json["groups"]] == ["g2"]
    assert routes.get("orders").groups == ("g2",)
    # g1's messages are still in its log: the route no longer sends anyone there.
    with Client(g1) as c:
        assert c.describe_topic("orders")["queue_ranges"][0]["next_offset"] == 4


def test_remove_group_with_force_leaves_the_lag_behind(groups, etcd):
    routes, nodes = groups
    g1 = nodes["g1"].address
    on_etcd = ("--coordinator", etcd.url, "--cluster-name", CLUSTER)
    assert fmq("topic", "create", "orders", "--queues-per-group", "2", *on_etcd).code == 0
    before = routes.snapshot()
    with Client(g1) as c:  # ROUTE_CHANGE's own checks, each naming what is wrong
        for text, problem in (
                ("{not json", "must be a JSON object"),
                ('["drain"]', "must be a JSON object"),
                ('{"action": "drain", "topic": "orders"}', "needs the field 'group'"),
                ('{"action": "rename", "topic": "orders"}', "must be one of create, "),
                ('{"topic": "orders"}', "action None must be one of create, expand, "),
                ('{"action": "create", "topic": "x", "queues_per_group": "2"}',
                 "'queues_per_group' of a route change must be an integer"),
                ('{"action": "create", "topic": "x", "queues_per_group": 0}', "1..65535")):
            with pytest.raises(InvalidArgument, match=re.escape(problem)):
                c.call(Op.ROUTE_CHANGE, {"json": text})
    assert routes.snapshot().routes == before.routes
    send(g1, {0: 1})
    read_and_commit(g1, 1, "committed")
    send(g1, {1: 1})
    assert fmq("topic", "drain", "orders", "--group", "g1", *on_etcd).code == 0
    refused = fmq("topic", "remove-group", "orders", "--group", "g1", *on_etcd)
    assert refused.code == 1 and "billing queue 1: 1 unread" in refused.stderr
    forced = fmq("topic", "remove-group", "orders", "--group", "g1", "--force", *on_etcd)
    assert forced.code == 0, forced.stderr
    assert "removed from topic orders" in forced.stdout
    assert routes.get("orders").groups == ("g2",)


def commit(address: str, queue_id: int, next_offset: int) -> None:
    """Consumer group billing commits ``next_offset`` in the node's local queue."""
    with Client(address) as c:
        c.call(Op.COMMIT_OFFSET, {"group": "billing", "topic": "orders", "queue_id": queue_id,
                                  "next_offset": next_offset})


def test_remove_group_counts_a_consumer_group_that_committed_only_in_another_group(groups,
                                                                                   etcd):
    # billing read everything of g1's queues and never touched g2's: it subscribes to
    # orders all the same, so g2's messages are unread, not "no lag".
    routes, nodes = groups
    g1, g2 = nodes["g1"].address, nodes["g2"].address
    on_etcd = ("--coordinator", etcd.url, "--cluster-name", CLUSTER)
    assert fmq("topic", "create", "orders", "--queues-per-group", "2", *on_etcd).code == 0
    send(g1, {0: 2})
    send(g1, {3: 3})  # global index 3: g2's local queue 1
    commit(g1, 0, 2)

    assert fmq("topic", "drain", "orders", "--group", "g2", *on_etcd).code == 0
    before = routes.get("orders")
    for where in (on_etcd, ("--server", g1), ("--server", g2)):
        refused = fmq("topic", "remove-group", "orders", "--group", "g2", *where)
        assert refused.code == 1, refused.stdout
        assert "consumer group billing queue 1: 3 unread" in refused.stderr, refused.stderr
        assert routes.get("orders") == before

    status = fmq("cluster", "status", *on_etcd, "--json")
    assert status.code == 0, status.stderr
    assert lag_of(status.json, "g2") == {0: 0, 1: 3}
    row = next(r for r in status.json["lag"] if r["group"] == "g2" and r["queue_id"] == 1)
    assert (row["committed"], row["next_offset"], row["global_index"]) == (None, 3, 3)

    commit(g2, 1, 3)
    removed = fmq("topic", "remove-group", "orders", "--group", "g2", *on_etcd)
    assert removed.code == 0, removed.stderr
    assert routes.get("orders").groups == ("g1",)


def test_message_find_searches_every_group_of_the_route(groups, etcd):
    routes, nodes = groups
    g1, g2 = nodes["g1"].address, nodes["g2"].address
    on_etcd = ("--coordinator", etcd.url, "--cluster-name", CLUSTER)
    assert fmq("topic", "create", "orders", "--queues-per-group", "2", *on_etcd).code == 0
    with Producer(g1) as p:  # named queues: the key's own hash would pick one group only
        p.send("orders", b"in g2", key="order-9", queue_id=3)
        p.send("orders", b"in g1", key="order-9", queue_id=0)
    found = fmq("message", "find", "--key", "order-9", "--topic", "orders", "--server", g1,
                "--json")
    assert found.code == 0, found.stderr
    rows = [json.loads(line) for line in found.stdout.splitlines()]
    assert sorted((d["broker_group"], d["queue_id"], d["body"]) for d in rows) == [
        ("g1", 0, "in g1"), ("g2", 1, "in g2")]
    # Through g2 at once: the view a search reads is etcd's, not g2's copy (which learns a
    # route through its watch, and in CI had not yet when the search ran).
    text = fmq("message", "find", "--key", "order-9", "--topic", "orders", "--server", g2)
    assert text.code == 0, text.stderr
    assert "broker group  g2 (its queue 1 is the topic's queue 3)" in text.stdout, text.stdout
    assert "broker group  g1 (its queue 0 is the topic's queue 0)" in text.stdout
    everywhere = fmq("message", "find", "--key", "order-9", "--server", g2, "--json")
    assert everywhere.code == 0, everywhere.stderr
    assert sorted(json.loads(line)["broker_group"]
                  for line in everywhere.stdout.splitlines()) == ["g1", "g2"]
    # A topic the cluster does not route (g2's own, made before it had a route) is searched
    # where it is, and a lookup creates no route for it.
    assert routes.get("audit") is None
    with Client(g2) as c:
        c.create_topic("audit", 1)
        c.call(Op.SEND, {"message": message_to_wire(Message("audit", b"audited",
                                                            key="order-9"))})
    assert routes.get("audit") is None
    local = fmq("message", "find", "--key", "order-9", "--topic", "audit", "--server", g2,
                "--json")
    assert local.code == 0, local.stderr
    assert [json.loads(line)["body"] for line in local.stdout.splitlines()] == ["audited"]
    assert routes.get("audit") is None


def test_the_cluster_view_holds_a_route_made_elsewhere_a_moment_ago(groups, etcd):
    """ROUTE "" (the view `fmq message find` and `fmq topic queues` read) answers etcd's
    routes, not the node's copy that a watch fills a moment later: each route created in
    etcd is in g2's very next view."""
    routes, nodes = groups
    with Client(nodes["g2"].address) as c:
        for i in range(20):
            made = routes.create(f"fresh-{i}", 1, ["g1", "g2"])
            view = json.loads(c.call(Op.ROUTE, {"topic": ""})["json"])
            assert view["routes"].get(f"fresh-{i}", {}).get("version") == made.version, i
            assert view["revision"] >= made.version
