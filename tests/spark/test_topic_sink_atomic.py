"""A batch write into ``fmq-topic`` is all or nothing even when its commit fails midway
(docs/spark.md, *Writing to topics*; docs/transactions.md, *Scopes*): a real local Spark
session, real ``fmq server`` processes, SIGKILL. The server killed right after the
driver's first COMMIT, and the driver killed there (its whole session, JVM included):
once the server runs again every row of the write is there once and nothing is left
open (the broker commits what the write's decision names). A write that fails before its
decision leaves nothing visible; one whose decision's answer was lost is carried out by
the abort Spark then calls."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from fmq.client import Client
from fmq.protocol import Op
from tests.cluster.kit import CONFIG as CLUSTER_CONFIG
from tests.cluster.kit import known_everywhere, local_queues, two_groups
from tests.crashkit import ROOT
from tests.server.harness import ServerProcess, broker_stats, wait_until

from .test_topic_sink import MAX_MESSAGE, open_sink_transactions, stored
from .topic_traffic import SERVER_CONFIG

#: Queues of the two-group topic in each group.
PER_GROUP = 2

#: The broker finishes a decided write 1 s after it learned of it (the default is 6 s).
SOON_DUE = {**SERVER_CONFIG, "max_message_size": MAX_MESSAGE, "tx_check_after_ms": 1000,
            "tx_check_max_interval_ms": 2000}


@pytest.fixture
def own_server(tmp_path):
    srv = ServerProcess(str(tmp_path / "data"), SOON_DUE)
    srv.start()
    yield srv
    srv.kill()


@pytest.fixture(scope="module")
def hooked(spark):
    from fmq.spark.topic_source import register

    from .sink_jobs import HookedSink

    register(spark)
    spark.dataSource.register(HookedSink)
    return spark


def _write(spark, address: str, topic: str, bodies: list[bytes], hook: str,
           argument: str = "") -> BaseException | None:
    """A batch write of ``bodies`` in 3 tasks through the hooked sink; what it raised."""
    df = spark.createDataFrame([(b,) for b in bodies], "body binary").repartition(3)
    try:
        (df.write.format("fmq-topic-hooked").option("servers", address)
         .option("topic", topic).option("hook", hook).option("target", argument)
         .mode("append").save())
    except Exception as exc:  # noqa: BLE001 - the test looks at what it was
        return exc
    return None


def _bodies(srv: ServerProcess, topic: str) -> list[bytes]:
    return sorted(bytes(m.body) for m in stored(srv, topic))


@pytest.mark.timeout(600)
def test_a_server_killed_after_the_first_commit_ends_with_every_row_once(hooked, own_server):
    """The driver's first COMMIT answers, then the server is killed (SIGKILL): the other
    COMMITs fail. Started again, the server commits the rest of the write on its own;
    every row is there once, nothing is open, and the write reported success (it was
    decided). Before the decision existed the write failed with the first task's rows
    visible and the others' transactions open for good (nobody decided them)."""
    topic = "sink-atomic-server-killed"
    bodies = [f"s-{i}".encode() for i in range(90)]
    failed = _write(hooked, own_server.address, topic, bodies, "kill-server",
                    str(own_server.proc.pid))
    assert not own_server.alive, f"the server was not killed at the first COMMIT: {failed!r}"
    own_server.kill()
    own_server.start()
    wait_until(lambda: _bodies(own_server, topic) == sorted(bodies), 60,
               f"every row of the write (the write raised {failed!r})")
    wait_until(lambda: open_sink_transactions(own_server) == [], 30, "nothing open")
    assert broker_stats(own_server.address)["tx_decided_scope_commits"] >= 1
    assert failed is None, failed
    assert _bodies(own_server, topic) == sorted(bodies)  # once each, still


@pytest.mark.timeout(600)  # a child session of its own, killed with SIGKILL
def test_a_driver_killed_after_its_decision_ends_with_every_row_once(tmp_path, own_server):
    """A write on ``local[2,3]`` whose first attempt of one task is lost after its
    prepare; the driver's whole session (JVM and Python workers included) is killed with
    SIGKILL right after its first COMMIT answered, and no later write comes: the broker
    commits the other chosen transactions and rolls back the lost attempt's, every row is
    there once, nothing is open. Before, the rest stayed open and invisible for good."""
    marker = tmp_path / "killed-after-commit"
    local_dir = tmp_path / "spark-local"
    local_dir.mkdir()
    topic = "sink-atomic-driver-killed"
    run = subprocess.run(
        [sys.executable, "-m", "tests.spark.sink_jobs", "lost-decision", own_server.address,
         topic, "300", str(local_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=400, start_new_session=True,
        env={**os.environ, "FMQ_SINK_KILL_AFTER_COMMIT": str(marker)})
    assert run.returncode == -signal.SIGKILL, run.stdout[-3000:] + run.stderr[-3000:]
    assert marker.exists(), "the driver was not killed at its crash point"
    expected = sorted(f"l-{i}".encode() for i in range(300))
    wait_until(lambda: _bodies(own_server, topic) == expected, 60, "every row of the write")
    wait_until(lambda: open_sink_transactions(own_server) == [], 30,
               "the lost attempt's transaction and the decision to be ended")
    stats = broker_stats(own_server.address)
    assert stats["tx_decided_scope_commits"] >= 1
    assert stats["tx_closed_scope_rollbacks"] >= 1  # the lost attempt: not a winner
    assert _bodies(own_server, topic) == expected


def test_a_write_failing_before_its_decision_leaves_nothing(hooked, own_server):
    """The decision never reaches the server: Spark calls abort, which closes the scope
    and rolls every transaction back; nothing is visible, nothing open."""
    topic = "sink-atomic-undecided"
    failed = _write(hooked, own_server.address, topic, [f"u-{i}".encode() for i in range(30)],
                    "refuse-decision")
    assert failed is not None and "never reached the server" in str(failed)
    assert open_sink_transactions(own_server) == []
    assert _bodies(own_server, topic) == []


def test_an_abort_after_the_decision_carries_it_out(hooked, tmp_path):
    """The decision is stored but its answer lost: the commit fails, Spark calls abort,
    which finds the decision and commits the write instead of rolling it back: every row
    there once, nothing open (the write still reports the commit's failure). The server
    would finish the decision only after 10 minutes: the abort did it."""
    srv = ServerProcess(str(tmp_path / "data"), {**SOON_DUE, "tx_check_after_ms": 600_000})
    srv.start()
    try:
        topic = "sink-atomic-answer-lost"
        bodies = [f"a-{i}".encode() for i in range(30)]
        failed = _write(hooked, srv.address, topic, bodies, "lose-decision-answer",
                        str(tmp_path / "answer-lost"))
        assert failed is not None and "answer was lost" in str(failed)
        assert (tmp_path / "answer-lost").exists()
        assert _bodies(srv, topic) == sorted(bodies)
        assert open_sink_transactions(srv) == []
        assert broker_stats(srv.address)["tx_decided_scope_commits"] == 0
    finally:
        srv.kill()


#: Two one-node broker groups finishing a decided write 1 s after they learned of it.
GROUPS_SOON = {**CLUSTER_CONFIG, "max_message_size": MAX_MESSAGE, "tx_check_after_ms": 1000,
               "tx_check_max_interval_ms": 2000}
SPREAD = "sink-atomic-two-groups"


def _group_bodies(node: ServerProcess) -> list[bytes]:
    """The consumable bodies of SPREAD's queues held by ``node``'s broker group."""
    out: list[bytes] = []
    with Client(node.address, retries=0, request_timeout=10) as c:
        for q in range(PER_GROUP):
            ans = c.call(Op.PULL, {"topic": SPREAD, "queue_id": q, "offset": 0,
                                   "max_messages": 10_000, "wait_ms": 0})
            out += [bytes(m["body"]) for m in ans["messages"]]
    return out


@pytest.mark.timeout(600)  # a child session of its own, killed with SIGKILL; two groups
def test_a_driver_killed_between_two_groups_decisions_ends_with_every_row_once(tmp_path):
    """A write into a topic routed over broker groups g1 and g2 (6 tasks keyed by
    partition: their transactions in both groups, and attempt 0 of partition 1 lost after
    its prepare); the driver's whole session is killed with SIGKILL right after g1's
    decision answered, before g2's. g2's primary finds the write's decision in g1, writes
    its own mark from it and commits its winners: every row there once over the two
    groups, nothing open in either. Before, g2's transactions stayed open for good (nobody
    answers their check-back) while g1's rows were visible."""
    marker = tmp_path / "killed-between-decisions"
    local_dir = tmp_path / "spark-local"
    local_dir.mkdir()
    with two_groups(tmp_path, GROUPS_SOON) as (store, nodes, _etcd):
        route = store.create(SPREAD, PER_GROUP, ["g1", "g2"])
        known_everywhere(nodes, SPREAD, route.version)
        for node in nodes.values():
            wait_until(lambda n=node: local_queues(n, SPREAD) == PER_GROUP, 30,
                       "the route's queues made on each primary")
        run = subprocess.run(
            [sys.executable, "-m", "tests.spark.sink_jobs", "lost-between-decisions",
             nodes["g1"].address, SPREAD, "300", str(local_dir)],
            cwd=ROOT, capture_output=True, text=True, timeout=400, start_new_session=True,
            env={**os.environ, "FMQ_SINK_KILL_AFTER_COMMIT": str(marker)})
        assert run.returncode == -signal.SIGKILL, run.stdout[-3000:] + run.stderr[-3000:]
        assert marker.exists(), "the driver was not killed at its crash point"
        expected = sorted(f"l-{i}".encode() for i in range(300))
        wait_until(lambda: sorted(_group_bodies(nodes["g1"]) + _group_bodies(nodes["g2"]))
                   == expected, 90, "every row of the write over both groups")
        for node in nodes.values():
            wait_until(lambda n=node: open_sink_transactions(n) == [], 60,
                       f"nothing of the write open at {node.address}")
        assert _group_bodies(nodes["g2"]), "no task wrote to g2: the write spans one group"
        assert broker_stats(nodes["g2"].address)["tx_scope_decisions_adopted"] == 1
        assert sorted(_group_bodies(nodes["g1"]) + _group_bodies(nodes["g2"])) == expected
