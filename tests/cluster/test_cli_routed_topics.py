"""What `fmq produce`, `fmq topic describe` and `fmq topic list` say of a topic routed over
two broker groups (real etcd, real servers): the group that stored each message, every
group's queues, and a group `remove-group` took out of the route marked as such."""

from __future__ import annotations

import json

from tests.server.harness import json_lines, wait_until

from .conftest import CLUSTER, NEEDS_ETCD, fmq
from .kit import known_everywhere, two_groups

pytestmark = NEEDS_ETCD


def test_produce_describe_and_list_speak_of_the_whole_route(tmp_path):
    with two_groups(tmp_path) as (_store, nodes, etcd):
        where = ("--coordinator", etcd.url, "--cluster-name", CLUSTER)
        made = fmq("topic", "create", "orders", "--queues-per-group", "2", *where)
        assert made.code == 0, made.stderr
        known_everywhere(nodes, "orders", 1)
        g1 = nodes["g1"].address

        # Each send names the group that stored it (its offsets are that group's).
        sent = fmq("produce", "--topic", "orders", "--body", "m{i}", "--count", "8",
                   "--server", g1, "--json")
        assert sent.code == 0, sent.stderr
        groups = [d["group"] for d in json_lines(sent.stdout)]
        assert set(groups) == {"g1", "g2"}, groups
        text = fmq("produce", "--topic", "orders", "--body", "x", "--server", g1)
        assert text.code == 0 and " in broker group g" in text.stdout, text.stdout

        # describe on one node shows every group's queues by global index.
        described = fmq("topic", "describe", "orders", "--server", g1, "--json")
        assert described.code == 0, described.stderr
        t = json.loads(described.stdout)
        assert t["route_here"] == {"group": "g1", "in_route": True, "base": 0, "queues": 2,
                                   "permission": "rw"}
        rows = t["route"]["queues"]
        assert [(q["group"], q["queue_id"], q["group_queue"]) for q in rows] == [
            ("g1", 0, 0), ("g1", 1, 1), ("g2", 2, 0), ("g2", 3, 1)]
        assert sum(q["next_offset"] - q["min_offset"] for q in rows) == 9
        human = fmq("topic", "describe", "orders", "--server", g1)
        assert "queues of every broker group of its route" in human.stdout, human.stdout
        assert "g2" in human.stdout and "g1, the route's queues 0..1" in human.stdout

        # g1 leaves the route: its node still has the topic, marked as no longer routed.
        assert fmq("topic", "drain", "orders", "--group", "g1", *where).code == 0
        removed = fmq("topic", "remove-group", "orders", "--group", "g1", "--force", *where)
        assert removed.code == 0, removed.stderr

        def g1_out() -> bool:
            listed = fmq("topic", "list", "--server", g1, "--json")
            [row] = [r for r in json_lines(listed.stdout) if r["name"] == "orders"]
            return row.get("route_here", {}).get("in_route") is False

        wait_until(g1_out, 30, "g1's node to know it left the route of orders")
        listed = fmq("topic", "list", "--server", g1)
        assert "g1: removed" in listed.stdout, listed.stdout
        human = fmq("topic", "describe", "orders", "--server", g1)
        assert "no longer in the topic's route (remove-group)" in human.stdout, human.stdout
        # The group that stays lists it as its own, and outside a cluster nothing changes.
        still = fmq("topic", "list", "--server", nodes["g2"].address)
        assert "g2: 2..3" in still.stdout, still.stdout
