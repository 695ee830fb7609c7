"""The classic group protocol's state machine on a real event loop: a generation for the
members that joined, the leader's assignments, heartbeats during a rebalance, expiry."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from fmq.server.kafka import group_coordinator
from fmq.server.kafka.group_coordinator import GroupCoordinator, GroupError

PROTOCOLS = [("range", b"sub-range"), ("roundrobin", b"sub-rr")]


@pytest.fixture(autouse=True)
def quick_settle(monkeypatch):
    monkeypatch.setattr(group_coordinator, "SETTLE_S", 0.05)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_members_joining_together_share_a_generation_and_the_leaders_assignments():
    async def scenario():
        groups = GroupCoordinator(asyncio.get_running_loop())
        a, b = await asyncio.gather(
            groups.join("g", "", "c", "consumer", PROTOCOLS, 10, 10),
            groups.join("g", "", "c", "consumer", PROTOCOLS[1:], 10, 10))
        assert a["generation_id"] == b["generation_id"] == 1
        assert a["protocol_name"] == b["protocol_name"] == "roundrobin"  # the common one
        leader = a if a["members"] else b
        follower = b if leader is a else a
        assert leader["leader"] == leader["member_id"] and not follower["members"]
        assert {m["metadata"] for m in leader["members"]} == {b"sub-rr"}
        follower_sync = asyncio.ensure_future(groups.sync(
            "g", 1, follower["member_id"], {}))
        await asyncio.sleep(0.01)
        assert not follower_sync.done()  # waits for the leader's assignments
        mine, _ = await groups.sync("g", 1, leader["member_id"], {
            leader["member_id"]: b"p0,p1", follower["member_id"]: b"p2,p3"})
        assert mine == b"p0,p1"
        assert (await follower_sync)[0] == b"p2,p3"
        groups.heartbeat("g", 1, follower["member_id"])  # stable: fine
        return groups, leader, follower

    run(scenario())


def test_a_leave_starts_a_rebalance_that_heartbeats_announce():
    async def scenario():
        groups = GroupCoordinator(asyncio.get_running_loop())
        a, b = await asyncio.gather(
            groups.join("g", "", "c", "consumer", PROTOCOLS, 10, 10),
            groups.join("g", "", "c", "consumer", PROTOCOLS, 10, 10))
        groups.leave("g", b["member_id"])
        with pytest.raises(GroupError) as caught:
            groups.heartbeat("g", 1, a["member_id"])
        assert caught.value.code == ErrorCode.rebalance_in_progress
        again = await groups.join("g", a["member_id"], "c", "consumer", PROTOCOLS, 10, 10)
        assert again["generation_id"] == 2 and [m["member_id"] for m in again["members"]] == [
            a["member_id"]]
        with pytest.raises(GroupError) as caught:
            groups.heartbeat("g", 1, a["member_id"])
        assert caught.value.code == ErrorCode.illegal_generation

    run(scenario())


def test_a_silent_member_expires_and_an_unknown_one_is_refused():
    async def scenario():
        groups = GroupCoordinator(asyncio.get_running_loop())
        a = await groups.join("g", "", "c", "consumer", PROTOCOLS, 0.2, 10)
        await asyncio.sleep(0.3)
        groups.expire()
        with pytest.raises(GroupError) as caught:
            groups.heartbeat("g", a["generation_id"], a["member_id"])
        assert caught.value.code == ErrorCode.unknown_member_id
        with pytest.raises(GroupError) as caught:
            await groups.join("g", "made-up", "c", "consumer", PROTOCOLS, 10, 10)
        assert caught.value.code == ErrorCode.unknown_member_id

    run(scenario())


def test_a_member_that_does_not_join_again_is_left_out_at_the_deadline():
    async def scenario():
        groups = GroupCoordinator(asyncio.get_running_loop())
        a, b = await asyncio.gather(
            groups.join("g", "", "c", "consumer", PROTOCOLS, 10, 0.3),
            groups.join("g", "", "c", "consumer", PROTOCOLS, 10, 0.3))
        # A newcomer starts a rebalance; b never joins again.
        newcomer, again = await asyncio.gather(
            groups.join("g", "", "c", "consumer", PROTOCOLS, 10, 0.3),
            groups.join("g", a["member_id"], "c", "consumer", PROTOCOLS, 10, 0.3))
        assert newcomer["generation_id"] == again["generation_id"] == 2
        members = {m["member_id"] for m in (newcomer["members"] or again["members"])}
        assert members == {a["member_id"], newcomer["member_id"]}

    run(scenario())
