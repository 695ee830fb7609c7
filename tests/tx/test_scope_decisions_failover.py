"""A scope's decision in a replicated group (docs/transactions.md, *Scopes*): the decision
mark is replicated before its PREPARE answers (``ack_mode`` sync), so when the primary is
killed (SIGKILL) between the decision and its owner's COMMITs, the follower promoted in
its place finds the decision in the log it copied and finishes it: the winners
committed, the loser rolled back, nothing open. A real etcd and three real ``fmq server``
nodes."""

from __future__ import annotations

import os

import pytest

from fmq import Message, TxState
from fmq.client import Client, TransactionProducer
from fmq.protocol import Op
from fmq.tx.scope_decision import decision_message
from tests.etcdkit import ETCD
from tests.replication.failover_kit import GROUP_CONFIG, FailoverGroup
from tests.server.harness import broker_stats, wait_until

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

TOPIC = "decided"
#: Long enough that the first primary does not finish the decision before the test kills
#: it; the promoted one finishes it this long after its promotion recovered it.
CONFIG = {**GROUP_CONFIG, "tx_check_after_ms": 6000, "tx_check_max_interval_ms": 6000}


def _open_ids(address: str) -> set[str]:
    with Client(address) as c:
        return {t["tx_id"] for t in c.call(Op.LIST_TX, {})["transactions"]}


def _consumable(address: str) -> list[bytes]:
    out: list[bytes] = []
    with Client(address, request_timeout=10, retries=5) as c:
        for q in range(CONFIG["queues_per_topic"]):
            ans = c.call(Op.PULL, {"topic": TOPIC, "queue_id": q, "offset": 0,
                                   "max_messages": 1000, "wait_ms": 0})
            out += [bytes(m["body"]) for m in ans["messages"]]
    return sorted(out)


@pytest.mark.timeout(300)
def test_a_promoted_follower_finishes_its_old_primarys_decision(tmp_path):
    group = FailoverGroup(str(tmp_path), config=CONFIG).start()
    try:
        old = group.wait_whole(timeout=60)
        ids = [f"W//{i}" for i in range(3)]
        with TransactionProducer(group.servers, "g", lambda u: TxState.UNKNOWN,
                                 feedback=False) as p:
            for tx_id in ids:
                p.prepare([Message(TOPIC, tx_id.encode())], tx_id=tx_id)
            p.prepare([decision_message(TOPIC, "W", ids[:2])], tx_id="W")
            assert p.commit(ids[0]) == TxState.COMMIT  # then the owner and primary die
        assert _open_ids(old.address) == {"W", *ids[1:]}
        old.kill()
        new = group.wait_primary(among=group.others(old), timeout=60)
        wait_until(lambda: not _open_ids(new.address), 60,
                   "the promoted primary to finish the decision")
        # The winners' COMMITs are durable; the index and the followers' high watermark
        # make them readable a moment later.
        wait_until(lambda: _consumable(new.address) == [b"W//0", b"W//1"], 30,
                   "both winners readable and the loser not")
        assert broker_stats(new.address)["tx_decided_scope_commits"] == 1
        assert broker_stats(new.address)["tx_closed_scope_rollbacks"] == 1
    finally:
        group.kill()
