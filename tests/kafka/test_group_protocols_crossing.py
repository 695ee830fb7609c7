"""Joins of the two protocols crossing each other across broker groups (docs/kafka.md,
*Consumer groups over broker groups*): each side counts its join as a live member while its
question to the other broker groups is out, so the other side, asked meanwhile, refuses
its own join; and a join whose question failed leaves nothing behind. Driven on a real
event loop with the two coordinators wired to each other as two broker groups' primaries
are (the other broker group's answer is the other coordinator's count)."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from fmq.errors import GroupProtocolConflict, GroupProtocolUnchecked
from fmq.server.kafka import group_coordinator
from fmq.server.kafka.group_coordinator import KafkaGroupCoordinator, KafkaGroupError
from fmq.server.ops.consumer_groups import ConsumerGroupCoordinator
from fmq.server.ops.group_protocol_gate import GroupStartGate


def _kafka_join(c: KafkaGroupCoordinator, group: str = "g"):
    return c.join(group, "", None, "client", "host", 6000, 2000, "consumer",
                  [("range", b"r")], require_known_id=False)


def _fmq_side() -> GroupStartGate:
    return GroupStartGate(ConsumerGroupCoordinator(4, 10_000))


def test_a_kafka_join_asking_counts_as_a_member_and_an_fmq_join_meanwhile_is_refused(
        monkeypatch):
    monkeypatch.setattr(group_coordinator, "INITIAL_REBALANCE_DELAY_S", 0.05)

    async def scenario() -> None:
        kafka = KafkaGroupCoordinator(asyncio.get_running_loop(), lambda _g: 0)
        fmq = _fmq_side()  # another broker group
        asked, answer = asyncio.Event(), asyncio.Event()

        async def fmq_elsewhere(group: str) -> None:  # the Kafka join's question
            asked.set()
            await answer.wait()
            if fmq.members(group):
                raise KafkaGroupError(ErrorCode.inconsistent_group_protocol)

        async def kafka_at_coordinator(group: str) -> None:  # the FMQ join's question
            if kafka.live_members(group):
                raise GroupProtocolConflict(group, kafka.live_members(group))

        kafka.fmq_elsewhere = fmq_elsewhere
        fmq.ask_elsewhere = kafka_at_coordinator
        joining = asyncio.ensure_future(_kafka_join(kafka))
        await asyncio.wait_for(asked.wait(), 5)
        assert kafka.live_members("g") == 1  # asking: counted
        with pytest.raises(GroupProtocolConflict) as refused:
            await fmq.join("g", None, ["t"], object())
        assert refused.value.members == 1
        assert fmq.members("g") == 0 and "g" not in fmq.groups.groups
        answer.set()
        joined = await asyncio.wait_for(joining, 5)
        assert joined["error_code"] == ErrorCode.none and kafka.live_members("g") == 1

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_an_fmq_join_asking_counts_as_a_member_and_a_kafka_join_meanwhile_is_refused():
    async def scenario() -> None:
        kafka = KafkaGroupCoordinator(asyncio.get_running_loop(), lambda _g: 0)
        fmq = _fmq_side()
        asked, answer = asyncio.Event(), asyncio.Event()

        async def kafka_at_coordinator(group: str) -> None:
            asked.set()
            await answer.wait()
            if kafka.live_members(group):
                raise GroupProtocolConflict(group, kafka.live_members(group))

        async def fmq_elsewhere(group: str) -> None:
            if fmq.members(group):
                raise KafkaGroupError(ErrorCode.inconsistent_group_protocol)

        kafka.fmq_elsewhere = fmq_elsewhere
        fmq.ask_elsewhere = kafka_at_coordinator
        joining = asyncio.ensure_future(fmq.join("g", None, ["t"], object()))
        await asyncio.wait_for(asked.wait(), 5)
        assert fmq.members("g") == 1
        with pytest.raises(KafkaGroupError) as refused:
            await _kafka_join(kafka)
        assert refused.value.code == ErrorCode.inconsistent_group_protocol
        assert kafka.live_members("g") == 0 and "g" not in kafka.groups
        answer.set()
        member, _, assignment = await asyncio.wait_for(joining, 5)
        assert fmq.members("g") == 1 and len(assignment) == 4

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_join_whose_question_failed_leaves_no_member_and_no_count():
    async def scenario() -> None:
        kafka = KafkaGroupCoordinator(asyncio.get_running_loop(), lambda _g: 0)
        fmq = _fmq_side()

        async def unreachable_fmq(group: str) -> None:
            raise KafkaGroupError(ErrorCode.coordinator_load_in_progress)

        async def unreachable_kafka(group: str) -> None:
            raise GroupProtocolUnchecked(group, "g2", "no primary now")

        kafka.fmq_elsewhere = unreachable_fmq
        fmq.ask_elsewhere = unreachable_kafka
        with pytest.raises(KafkaGroupError) as kafka_refused:
            await _kafka_join(kafka)
        assert kafka_refused.value.code == ErrorCode.coordinator_load_in_progress
        with pytest.raises(GroupProtocolUnchecked) as fmq_refused:
            await fmq.join("g", None, ["t"], object())
        assert fmq_refused.value.retriable
        assert kafka.live_members("g") == 0 and fmq.members("g") == 0
        assert "g" not in kafka.groups and "g" not in fmq.groups.groups
        # A bad group name is refused as such, never asked about.
        with pytest.raises(ValueError, match="group"):
            await fmq.join("bad\nname", None, ["t"], object())

    asyncio.run(asyncio.wait_for(scenario(), 30))
