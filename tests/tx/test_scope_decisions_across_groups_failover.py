"""A scope over two broker groups whose first group is replicated and fails over right
after the decision (docs/transactions.md, *Scopes*): the decision mark was replicated
before its PREPARE answered (``ack_mode`` sync), so the first group's promoted follower
holds it, and the second group, whose link finds the new primary (it re-reads the
cluster), carries it out: its winners committed, its loser rolled back, nothing open in
either group. Real etcd, a two-node g1 and a one-node g2 (real ``fmq server``
processes), SIGKILL of g1's primary."""

from __future__ import annotations

import os

import pytest

from fmq import Message, TxState
from fmq.client import TransactionProducer
from fmq.coordination.routes import ClusterRoutes
from fmq.errors import FMQError
from tests.cluster.kit import CLUSTER, CONFIG, known_everywhere, local_queues, role, wait_primary
from tests.etcdkit import ETCD, EtcdProcess
from tests.replication.cluster import wait_in_sync
from tests.server.harness import ServerProcess, broker_stats, wait_until

from .test_scope_decisions_across_groups import (
    GROUP,
    IN_G1,
    IN_G2,
    PER_GROUP,
    TOPIC,
    _bodies,
    _first_groups_decision,
    _safe_open,
)

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

#: g2, one node: its brokers look at a scope 1 s after they learned of its transactions.
SOON = {**CONFIG, "tx_check_after_ms": 1000, "tx_check_max_interval_ms": 2000}
#: g1 replicates synchronously: a PREPARE answers once its follower holds it.
SYNC_SOON = {**SOON, "ack_mode": "sync", "min_insync": 1}


def _read(node: ServerProcess) -> list[bytes] | None:
    """The node's bodies of TOPIC; None while it does not answer (a promotion)."""
    try:
        return _bodies(node)
    except FMQError:
        return None


def _node(tmp, etcd: EtcdProcess, group: str, n: int) -> ServerProcess:
    config = SYNC_SOON if group == "g1" else SOON
    return ServerProcess(str(tmp / f"{group}-n{n}"), config, extra_args=(
        "--coordinator", etcd.url, "--cluster-name", CLUSTER, "--group", group,
        "--node", f"{group}-n{n}")).start()


@pytest.mark.timeout(400)
def test_a_later_group_finds_the_decision_at_the_first_groups_new_primary(tmp_path):
    etcd = EtcdProcess(str(tmp_path / "etcd")).start()
    nodes: list[ServerProcess] = []
    try:
        old = _node(tmp_path, etcd, "g1", 1)
        nodes.append(old)
        wait_primary(old)
        follower = _node(tmp_path, etcd, "g1", 2)
        g2 = _node(tmp_path, etcd, "g2", 1)
        nodes += [follower, g2]
        wait_primary(g2)
        wait_in_sync(old, 1, timeout=60)
        store = ClusterRoutes(etcd.url, CLUSTER)
        wait_until(lambda: set(store.groups()) == {"g1", "g2"}, 30, "both groups registered")
        route = store.create(TOPIC, PER_GROUP, ["g1", "g2"])
        known_everywhere({"g1": old, "g2": g2}, TOPIC, route.version)
        for node in (old, g2):
            wait_until(lambda n=node: local_queues(n, TOPIC) == PER_GROUP, 30,
                       "the route's queues made on each primary")
        with TransactionProducer(old.address, GROUP, lambda _u: TxState.UNKNOWN,
                                 feedback=False) as p:
            for group, ids in (("g1", IN_G1), ("g2", IN_G2)):
                for tx_id in ids:
                    p.prepare([Message(TOPIC, tx_id.encode())], tx_id=tx_id, group=group)
            p.prepare([_first_groups_decision()], tx_id="W", group="g1")
        old.kill()  # the owner is gone too: g2 has no mark, g1 a new primary to come
        wait_until(lambda: role(follower) == "primary", 90, "g1's follower promoted")
        wait_until(lambda: _read(g2) == [b"W//c", b"W//d"], 90,
                   "g2 to carry out the decision held by g1's new primary")
        wait_until(lambda: _safe_open(g2) == set(), 60, "nothing open in g2")
        wait_until(lambda: _safe_open(follower) == set(), 60, "nothing open in g1")
        # g1's COMMIT of its winner is durable at its new primary; readable once a follower
        # holds it again (ack_mode sync): the old primary comes back as one.
        old.start()
        wait_until(lambda: _read(follower) == [b"W//a"], 90, "g1's winner readable")
        stats = broker_stats(g2.address)
        assert (stats["tx_scope_decisions_adopted"], stats["tx_decided_scope_commits"],
                stats["tx_closed_scope_rollbacks"]) == (1, 2, 1)
    finally:
        for node in nodes:
            node.kill()
        etcd.stop()
