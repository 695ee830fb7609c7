"""Committing Kafka consumer groups over a topic routed over two broker groups, with real
clients (librdkafka members in their own processes, kafka-python), real etcd and real
server processes: one coordinator per consumer group, every partition's commit stored by
the broker group hosting it (`fmq groups` there shows it), and a commit while the other
group's primary is down retried by the client until it lands, never answered as stored
before it is (docs/kafka.md, *Consumer groups over broker groups*)."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition
from kafka.errors import KafkaConnectionError
from kafka.structs import OffsetAndMetadata
from kio.schema.errors import ErrorCode

from tests.cluster.kit import wait_primary
from tests.server.harness import json_lines, run_cli, wait_until

from .group_kit import Member, produce, wait_for
from .test_cluster_topics import (
    PER_GROUP,
    TOPIC,
    _commit,
    _fetch,
    _fmq_committed,
    both_leaders_known,
    group_coordinated_by,
    topic_over_two_groups,
)

PARTITIONS = 2 * PER_GROUP
PER_PARTITION = 10


def _bootstrap(node) -> str:
    return f"127.0.0.1:{node.kafka_port}"


def _settled(members: list[Member]) -> bool:
    """Every partition owned by exactly one member, each member owning some."""
    owned = [set(m.assigned) for m in members]
    return (all(owned) and sum(map(len, owned)) == PARTITIONS
            and set().union(*owned) == set(range(PARTITIONS)))


def _read_by(members: list[Member]) -> list[str]:
    return [v for m in members for v in m.messages]


def _groups_shown(node, group: str) -> dict[int, dict]:
    """`fmq groups GROUP --json` of ``node``: its rows of TOPIC by the node's own queue."""
    shown = run_cli("groups", group, "--server", node.address, "--json")
    assert shown.returncode == 0, shown.stderr
    rows = {}
    for g in json_lines(shown.stdout):
        assert g["group"] == group
        rows.update({r["queue_id"]: r for r in g["offsets"] if r["topic"] == TOPIC})
    return rows


def test_a_committing_group_of_two_reads_a_routed_topic_once_and_resumes_from_its_commits(
        tmp_path):
    with topic_over_two_groups(tmp_path) as nodes:
        g1, g2 = nodes["g1"], nodes["g2"]
        wait_until(lambda: both_leaders_known(_bootstrap(g1)), 30,
                   "Metadata to name each group's primary for its partitions")
        # Each member is given a different broker group's node: both find the same
        # coordinator, and each commits whichever partitions it was assigned.
        members = [Member(_bootstrap(g1), "ledger", TOPIC), Member(_bootstrap(g2), "ledger", TOPIC)]
        try:
            wait_for(lambda: _settled(members), 60, "both members to hold two partitions each")
            values = produce(_bootstrap(g1), TOPIC, PARTITIONS, PER_PARTITION, "a")
            wait_for(lambda: set(_read_by(members)) == values, 60, "every message read")
            time.sleep(1)  # anything read twice would show up now
            assert sorted(_read_by(members)) == sorted(values), "a message lost or read twice"
        finally:
            for m in members:
                m.stop()

        # Each member printed a message only once its commit was answered: every queue's
        # commit is in the broker group hosting it, where `fmq groups` shows it.
        for node in (g1, g2):
            rows = _groups_shown(node, "ledger")
            assert set(rows) == set(range(PER_GROUP))
            for row in rows.values():
                assert row["committed"] == PER_PARTITION and row["lag"] == 0, row

        # Restarted, the group resumes from its commits in both broker groups: only what
        # came since is read (auto.offset.reset=earliest would read everything again).
        more = produce(_bootstrap(g2), TOPIC, PARTITIONS, PER_PARTITION, "b")
        again = [Member(_bootstrap(g2), "ledger", TOPIC), Member(_bootstrap(g1), "ledger", TOPIC)]
        try:
            wait_for(lambda: set(_read_by(again)) >= more, 60, "the new messages read")
            time.sleep(1)
            assert sorted(_read_by(again)) == sorted(more), "resumed elsewhere than the commits"
        finally:
            for m in again:
                m.stop()
        for node in (g1, g2):
            for row in _groups_shown(node, "ledger").values():
                assert row["committed"] == 2 * PER_PARTITION and row["lag"] == 0, row


def test_a_commit_while_the_other_groups_primary_is_down_is_retried_until_it_lands(
        tmp_path):
    with topic_over_two_groups(tmp_path) as nodes:
        g1, g2 = nodes["g1"], nodes["g2"]
        group = group_coordinated_by(nodes, "g1", "payments")
        produce(_bootstrap(g1), TOPIC, PARTITIONS, PER_PARTITION, "a")
        # Partition 2 is g2's queue 0.
        wait_until(lambda: _commit(g1, group, {0: 1, 2: 1}) == {0: ErrorCode.none,
                                                                2: ErrorCode.none}, 30,
                   "a first commit through g1's coordinator")
        g2.kill()

        # The raw answer: a retriable code for the whole commit, never success, although
        # g1 could store partition 0 (Kafka answers a commit as one).
        assert _commit(g1, group, {0: 2, 2: 2}) == {
            0: ErrorCode.coordinator_load_in_progress, 2: ErrorCode.coordinator_load_in_progress}

        # Reading the commits back: COORDINATOR_LOAD_IN_PROGRESS for the whole answer (a
        # client retries it), never -1 ("no commit"), which would reset the position.
        code, partitions = _fetch(g1, group, [0, 2])
        assert code == ErrorCode.coordinator_load_in_progress
        assert {c for c, _ in partitions.values()} == {ErrorCode.coordinator_load_in_progress}

        # librdkafka retries it twice itself, then the application gets Kafka's retriable
        # COORDINATOR_LOAD_IN_PROGRESS and may commit again.
        librdkafka = Consumer({"bootstrap.servers": _bootstrap(g1), "group.id": group,
                               "enable.auto.commit": False})
        try:
            librdkafka.assign([TopicPartition(TOPIC, 2, 0)])
            try:
                librdkafka.commit(offsets=[TopicPartition(TOPIC, 2, 3)], asynchronous=False)
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                assert error.code() == KafkaError.COORDINATOR_LOAD_IN_PROGRESS, error
            else:
                raise AssertionError("a commit was answered as stored while g2 was down")
        finally:
            librdkafka.close()

        # kafka-python retries a retriable commit by itself: its commit waits meanwhile.
        # (It may also fail to reach g2's own dead broker, when it picks that one to ask
        # something: a connection error of the client's, which the loop retries.)
        kp = KafkaConsumer(bootstrap_servers=_bootstrap(g1), group_id=group,
                           enable_auto_commit=False, retry_backoff_ms=200)
        kp.assign([KafkaPythonPartition(TOPIC, 2)])
        stored_at: list[float] = []
        other: list[Exception] = []

        def commit() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    kp.commit({KafkaPythonPartition(TOPIC, 2): OffsetAndMetadata(4, "", -1)},
                              timeout_ms=90_000)
                except KafkaConnectionError:
                    time.sleep(0.2)
                    continue
                except Exception as exc:  # noqa: BLE001 - the test reports whatever it was
                    other.append(exc)
                    return
                stored_at.append(time.monotonic())
                return

        committer = threading.Thread(target=commit, daemon=True)
        committer.start()
        try:
            time.sleep(3)
            assert (stored_at, other) == ([], []), "the commit ended while g2 was down"
            assert _fmq_committed(g1, group) == {0: 2}  # stored where it could be, unanswered

            restarted = time.monotonic()
            g2.start()
            wait_primary(g2)
            committer.join(120)
            assert other == [] and len(stored_at) == 1 and stored_at[0] > restarted
        finally:
            kp.close()
        assert _fmq_committed(g2, group) == {0: 4}
        assert _groups_shown(g2, group)[0]["committed"] == 4
