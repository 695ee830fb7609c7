"""The Kafka group coordinator's answers clients depend on, driven directly on an event
loop (the wire round trips are in test_groups.py): the MEMBER_ID_REQUIRED dance,
REBALANCE_IN_PROGRESS on a heartbeat during a rebalance, ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, the protocol all members support, and INCONSISTENT_GROUP_PROTOCOL."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from fmq.server.kafka import group_coordinator
from fmq.server.kafka.group_coordinator import KafkaGroupCoordinator, KafkaGroupError


def _join(c: KafkaGroupCoordinator, member_id: str = "", protocols=(("range", b"r"),),
          group: str = "g", ptype: str = "consumer"):
    return c.join(group, member_id, None, "client", "host", 6000, 2000, ptype,
                  list(protocols), require_known_id=True)


def test_join_dance_rebalance_and_generations(monkeypatch):
    monkeypatch.setattr(group_coordinator, "INITIAL_REBALANCE_DELAY_S", 0.05)

    async def scenario() -> None:
        c = KafkaGroupCoordinator(asyncio.get_running_loop(), lambda _g: 0)
        first = await _join(c)
        assert first["error_code"] == ErrorCode.member_id_required and first["member_id"]
        a = await _join(c, first["member_id"], (("range", b"ra"), ("roundrobin", b"rr")))
        assert a["error_code"] == ErrorCode.none and a["generation_id"] == 1
        assert a["leader"] == a["member_id"] and len(a["members"]) == 1
        code, _ = await c.sync("g", a["member_id"], None, 1, None, None,
                               {a["member_id"]: b"all"})
        assert code == ErrorCode.none
        assert c.heartbeat("g", a["member_id"], None, 1) == ErrorCode.none
        # A second member: the first learns of the rebalance from its heartbeat.
        second = await _join(c, protocols=(("roundrobin", b"rr2"),))
        b_join = asyncio.ensure_future(_join(c, second["member_id"],
                                             (("roundrobin", b"rr2"),)))
        await asyncio.sleep(0.01)
        assert c.heartbeat("g", a["member_id"], None, 1) == ErrorCode.rebalance_in_progress
        a2 = await _join(c, a["member_id"], (("range", b"ra"), ("roundrobin", b"rr")))
        b = await b_join
        assert a2["generation_id"] == b["generation_id"] == 2
        assert a2["protocol_name"] == "roundrobin"  # the one both support
        with pytest.raises(KafkaGroupError) as old:
            c.heartbeat("g", a["member_id"], None, 1)
        assert old.value.code == ErrorCode.illegal_generation
        with pytest.raises(KafkaGroupError) as unknown:
            c.heartbeat("g", "nobody", None, 2)
        assert unknown.value.code == ErrorCode.unknown_member_id
        with pytest.raises(KafkaGroupError) as other:
            await _join(c, protocols=(("sticky", b""),))
        assert other.value.code == ErrorCode.inconsistent_group_protocol
        assert c.leave("g", b["member_id"], None) == ErrorCode.none
        assert c.groups["g"].state.value == "PreparingRebalance"

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_fmq_members_refuse_kafka_join():
    async def scenario() -> None:
        c = KafkaGroupCoordinator(asyncio.get_running_loop(), lambda g: 2 if g == "g" else 0)
        with pytest.raises(KafkaGroupError) as refused:
            await _join(c)
        assert refused.value.code == ErrorCode.inconsistent_group_protocol
        assert (await _join(c, group="h"))["error_code"] == ErrorCode.member_id_required

    asyncio.run(asyncio.wait_for(scenario(), 30))
