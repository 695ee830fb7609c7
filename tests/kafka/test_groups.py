"""Kafka consumer groups through the Kafka door (docs/kafka.md, consumer groups), with real
clients against a real ``fmq server --kafka-port`` process: rebalances when a member is
killed, commits that a restart resumes from, cooperative-sticky, kafka-python, the admin
APIs, and the one-store rule shared with FMQ's own consumer groups."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer

from fmq.client import Consumer as FMQConsumer
from fmq.errors import GroupProtocolConflict
from tests.kafka.group_kit import KafkaServer, Member, make_topic, produce, wait_for
from tests.server.harness import json_lines, run_cli

PARTITIONS = 6


@pytest.fixture
def server(tmp_path):
    srv = KafkaServer(str(tmp_path / "data")).start()
    yield srv
    srv.kill()


def _owners_cover(members: list[Member]) -> bool:
    """Every partition owned by exactly one of ``members``."""
    owned = [p for m in members for p in m.assigned]
    return sorted(owned) == list(range(PARTITIONS))


def test_three_members_one_killed_rebalance_completes(server):
    values = make_topic(server.bootstrap, "orders", PARTITIONS, 20)
    members = [Member(server.bootstrap, "billing", "orders") for _ in range(3)]
    try:
        wait_for(lambda: _owners_cover(members) and all(m.assigned for m in members), 60,
                 "three members to share the six partitions")
        wait_for(lambda: len({v for m in members for v in m.messages}) == len(values), 60,
                 "every message consumed")
        members[0].kill()
        killed_at = time.monotonic()
        survivors = members[1:]
        # The session timeout (6 s) plus one rebalance, with room for a slow machine.
        wait_for(lambda: _owners_cover(survivors), 45,
                 "the two survivors to own all six partitions")
        assert time.monotonic() - killed_at < 45
        more = produce(server.bootstrap, "orders", PARTITIONS, 5, "b")
        wait_for(lambda: more <= {v for m in survivors for v in m.messages}, 60,
                 "the survivors to read the new messages of every partition")
        seen = [v for m in members for v in m.messages]
        assert sorted(seen) == sorted(values | more), "a message was lost or read twice"
    finally:
        for m in members:
            m.stop()


def test_commits_then_restart_resumes_from_them(server):
    values = make_topic(server.bootstrap, "ledger", PARTITIONS, 30)
    first = Member(server.bootstrap, "audit", "ledger", limit=70)
    try:
        wait_for(lambda: first.done, 60, "the first member to read and commit 70")
    finally:
        first.kill()  # a crash: no LeaveGroup, its session must time out
    second = Member(server.bootstrap, "audit", "ledger")
    try:
        wait_for(lambda: len(set(first.messages) | set(second.messages)) == len(values), 60,
                 "the restarted member to read the rest")
        time.sleep(1)  # anything read twice would show up now
        both = first.messages + second.messages
        assert sorted(both) == sorted(values), "a message was lost or read twice"
        assert len(first.messages) == 70 and len(second.messages) == len(values) - 70
    finally:
        second.stop()
    # One store: `fmq groups` shows the Kafka group's committed offsets and lag.
    shown = run_cli("groups", "audit", "--server", server.address, "--json")
    assert shown.returncode == 0, shown.stderr
    (group,) = json_lines(shown.stdout)
    assert group["group"] == "audit"
    offsets = {(r["topic"], r["queue_id"]): r for r in group["offsets"]}
    assert {q for t, q in offsets if t == "ledger"} == set(range(PARTITIONS))
    for (_t, _q), row in offsets.items():
        assert row["committed"] == 30 and row["lag"] == 0


def test_cooperative_sticky_incremental_rebalance(server):
    make_topic(server.bootstrap, "events", PARTITIONS, 1)
    config = {"bootstrap.servers": server.bootstrap, "group.id": "coop",
              "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
              "heartbeat.interval.ms": 500,
              "partition.assignment.strategy": "cooperative-sticky"}
    owned: list[set[int]] = [set(), set()]
    revoked: list[set[int]] = []

    def tracker(i: int):
        def assign(c, parts):
            owned[i].update(p.partition for p in parts)

        def revoke(c, parts):
            revoked.append({p.partition for p in parts})
            owned[i].difference_update(p.partition for p in parts)
        return assign, revoke

    consumers = [Consumer(config), Consumer(config)]
    try:
        a_assign, a_revoke = tracker(0)
        consumers[0].subscribe(["events"], on_assign=a_assign, on_revoke=a_revoke)
        deadline = time.monotonic() + 60
        while len(owned[0]) < PARTITIONS and time.monotonic() < deadline:
            consumers[0].poll(0.2)
        assert owned[0] == set(range(PARTITIONS))
        kept_by_first = set(owned[0])
        b_assign, b_revoke = tracker(1)
        consumers[1].subscribe(["events"], on_assign=b_assign, on_revoke=b_revoke)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
                owned[0] and owned[1] and owned[0] | owned[1] == set(range(PARTITIONS))
                and not owned[0] & owned[1]):
            for c in consumers:
                c.poll(0.1)
        assert owned[0] | owned[1] == set(range(PARTITIONS)) and not owned[0] & owned[1]
        assert owned[0] and owned[1]
        assert owned[0] <= kept_by_first  # sticky: the first kept what it did not give up
        # Incremental: the first member gave up only what moved (an eager rebalance
        # revokes everything it owned first).
        assert revoked and all(r and r != set(range(PARTITIONS)) for r in revoked)
    finally:
        for c in consumers:
            c.close()


def test_kafka_python_group_consumer(server):
    values = make_topic(server.bootstrap, "kp", PARTITIONS, 4)
    consumer = KafkaConsumer("kp", bootstrap_servers=server.bootstrap, group_id="kp-group",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=20000)
    try:
        got = set()
        deadline = time.monotonic() + 60
        while len(got) < len(values) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.update(r.value.decode() for r in batch)
        assert got == values
        consumer.commit()
        tp = __import__("kafka").TopicPartition("kp", 0)
        assert consumer.committed(tp) == 4
    finally:
        consumer.close()


def test_group_protocols_refuse_each_other(server):
    make_topic(server.bootstrap, "shared", PARTITIONS, 1)
    kafka_member = Member(server.bootstrap, "one-store", "shared")
    try:
        wait_for(lambda: kafka_member.assigned, 60, "the Kafka member's assignment")
        with pytest.raises(GroupProtocolConflict) as refused:
            FMQConsumer(server.address, "one-store", "shared")
        assert refused.value.group == "one-store" and refused.value.members == 1
    finally:
        kafka_member.stop()
    fmq_member = FMQConsumer(server.address, "fmq-side", "shared")
    try:
        kafka = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "fmq-side",
                          "session.timeout.ms": 6000})
        kafka.subscribe(["shared"])
        errors = []
        deadline = time.monotonic() + 30
        while not errors and time.monotonic() < deadline:
            msg = kafka.poll(0.5)
            if msg is not None and msg.error():
                errors.append(msg.error().code())
        kafka.close()
        assert KafkaError.INCONSISTENT_GROUP_PROTOCOL in errors
    finally:
        fmq_member.close()


def test_admin_describe_list_delete(server):
    make_topic(server.bootstrap, "admin-t", PARTITIONS, 2)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    member = Member(server.bootstrap, "watched", "admin-t")
    try:
        wait_for(lambda: len(member.messages) == 12, 60, "the member to read everything")
        listed = {g.group_id: g for g in admin.list_consumer_groups().result(30).valid}
        assert "watched" in listed
        assert str(listed["watched"].state).endswith("STABLE")
        described = admin.describe_consumer_groups(["watched"])["watched"].result(30)
        assert len(described.members) == 1
        assignment = described.members[0].assignment.topic_partitions
        assert sorted(tp.partition for tp in assignment) == list(range(PARTITIONS))
        with pytest.raises(Exception) as refused:
            admin.delete_consumer_groups(["watched"])["watched"].result(30)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        member.stop()  # SIGTERM: no LeaveGroup, the session timeout drops it

    def empty() -> bool:
        found = admin.describe_consumer_groups(["watched"])["watched"].result(30)
        return str(found.state).endswith("EMPTY")
    wait_for(empty, 45, "the stopped member's session to time out")
    # A group with no commits and no members is deleted; one with commits is refused
    # (FMQ keeps committed offsets as log records).
    idle = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "idle",
                     "session.timeout.ms": 6000})
    idle.subscribe(["admin-t"])
    deadline = time.monotonic() + 30
    while not idle.assignment() and time.monotonic() < deadline:
        idle.poll(0.2)
    idle.close()
    admin.delete_consumer_groups(["idle"])["idle"].result(30)
    with pytest.raises(Exception) as kept:
        admin.delete_consumer_groups(["watched"])["watched"].result(30)
    assert kept.value.args[0].code() == KafkaError.POLICY_VIOLATION
    committed = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "never"})
    try:
        found = committed.committed([TopicPartition("admin-t", 0)], timeout=30)
        assert found[0].offset == -1001  # never committed: Kafka's -1, "invalid offset"
    finally:
        committed.close()


def test_aiokafka_group_consumer(server):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioPartition

    values = make_topic(server.bootstrap, "aio", PARTITIONS, 3)

    async def consume() -> tuple[set[str], int | None]:
        consumer = AIOKafkaConsumer("aio", bootstrap_servers=server.bootstrap,
                                    group_id="aio-group", auto_offset_reset="earliest",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            got: set[str] = set()
            deadline = time.monotonic() + 60
            while len(got) < len(values) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                got.update(r.value.decode() for rs in batches.values() for r in rs)
            await consumer.commit()
            return got, await consumer.committed(AioPartition("aio", 2))
        finally:
            await consumer.stop()

    got, committed = asyncio.run(asyncio.wait_for(consume(), 90))
    assert got == values and committed == 3
