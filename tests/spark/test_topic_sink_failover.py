"""The ``fmq-topic`` sink writing into a replicated broker group while its primary is
killed (SIGKILL) and a follower takes over: a real etcd, three real ``fmq server`` nodes
(``ack_mode`` sync, ``min_insync`` 1), the tests' ``local[2]`` session. Partition 0 prepares its rows on the
old primary; the test kills it; partition 1 prepares on the new one; the driver commits
both there: every row visible once, nothing left open."""

from __future__ import annotations

import os
import threading

import pytest

from fmq.client import Client
from fmq.protocol import Op
from fmq.spark.sink_commit import TX_PREFIX
from tests.etcdkit import ETCD
from tests.replication.failover_kit import GROUP_CONFIG, FailoverGroup, role_of
from tests.server.harness import wait_until

from .sink_jobs import GatedSink

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

TOPIC = "sink-failover"
ROWS = 200


@pytest.fixture
def group(tmp_path):
    g = FailoverGroup(str(tmp_path),
                      config=GROUP_CONFIG).start()
    try:
        g.wait_whole(timeout=60)
        yield g
    finally:
        g.kill()


def consumable(servers: str) -> list[bytes]:
    """Every consumable message of TOPIC on the group's primary."""
    out: list[bytes] = []
    with Client(servers, node="primary", request_timeout=10, retries=5) as c:
        for q in range(GROUP_CONFIG["queues_per_topic"]):
            offset = 0
            while True:
                ans = c.call(Op.PULL, {"topic": TOPIC, "queue_id": q, "offset": offset,
                                       "max_messages": 1000, "wait_ms": 0})
                if not ans["messages"]:
                    break
                out += [bytes(m["body"]) for m in ans["messages"]]
                offset = ans["messages"][-1]["queue_offset"] + 1
    return out


@pytest.mark.timeout(600)  # a fail-over (lease TTL) inside a Spark write
def test_a_write_rides_through_a_fail_over_of_its_group(spark, group, tmp_path):
    spark.dataSource.register(GatedSink)
    gate = tmp_path / "gate"
    gate.mkdir()
    old = group.wait_whole(timeout=60)
    df = spark.createDataFrame([(f"f-{i}", f"k{i % 9}") for i in range(ROWS)],
                               "body string, key string").repartition(2)
    moved: dict = {}

    def fail_over() -> None:
        # Beside the write (Spark's data sources are looked up in the thread that
        # registered them): kill the primary once partition 0 prepared there, then let
        # partition 1 go on against the new one.
        try:
            wait_until(lambda: (gate / "prepared-0").exists(), 180,
                       "partition 0 to prepare on the first primary")
            old.kill()  # SIGKILL: partition 0's transaction is prepared, not committed
            moved["new"] = group.wait_primary(among=group.others(old), timeout=60)
        except BaseException as exc:  # noqa: BLE001 - the test asserts on it
            moved["error"] = exc
        finally:
            (gate / "open").touch()  # partition 1 prepares (on the new primary)

    mover = threading.Thread(target=fail_over, daemon=True)
    mover.start()
    (df.write.format("fmq-topic-gated").option("servers", group.servers)
     .option("topic", TOPIC).option("gate", str(gate)).mode("append").save())
    mover.join(120)
    assert "error" not in moved, moved
    new = moved["new"]
    assert not old.alive and role_of(new)["role"] == "primary"
    assert (gate / "prepared-1").exists()
    got = consumable(new.address)
    assert sorted(got) == sorted(f"f-{i}".encode() for i in range(ROWS))
    with Client(new.address, request_timeout=10) as c:
        left = [t["tx_id"] for t in c.call(Op.LIST_TX, {})["transactions"]
                if t["tx_id"].startswith(TX_PREFIX)]
    assert left == []
