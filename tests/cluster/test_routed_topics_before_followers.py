"""A primary whose followers are not in sync yet (a fail-over's first moments) cannot make
its route entries local topics: its log says so as the normal, passing state it is, not as
a warning, and a first send makes them once they are."""

from __future__ import annotations

from tests.server.harness import wait_until

from .conftest import CLUSTER, NEEDS_ETCD, fmq
from .kit import CONFIG, start_node, wait_primary

pytestmark = NEEDS_ETCD


def test_no_warning_while_followers_catch_up(tmp_path, etcd):
    # sync with min_insync 1 and no follower: every write waits for one that never comes.
    node = start_node(tmp_path, etcd, "g1", {**CONFIG, "ack_mode": "sync", "min_insync": 1})
    try:
        wait_primary(node)
        made = fmq("topic", "create", "orders", "--queues-per-group", "2",
                   "--coordinator", etcd.url, "--cluster-name", CLUSTER)
        assert made.code == 0, made.stderr
        wait_until(lambda: "routed topics of group g1 not made local yet" in node.log(), 60,
                   "the node to try making orders local")
        assert "could not make the routed topics" not in node.log(), node.log()
        assert "WARNING fmq.server: routed topics" not in node.log()
    finally:
        node.kill()
