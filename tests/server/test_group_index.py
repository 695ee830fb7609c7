"""The consumer-group coordinator keeps indexes (subscribers per topic, owners per queue,
members by owner and by last heartbeat) instead of scanning; these tests check that the
indexes always give the assignment a plain recomputation gives, and that the limits hold."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.errors import InvalidArgument
from fmq.server.ops.consumer_groups import ConsumerGroupCoordinator, ConsumerGroupLimits


def reference_assignment(members: dict[str, frozenset[str]], queues: int
                         ) -> dict[str, list[tuple[str, int]]]:
    """The rule, computed from scratch: subscribers of a topic sorted by id, queue q to
    subscriber q mod n."""
    out: dict[str, list[tuple[str, int]]] = {mid: [] for mid in members}
    for topic in sorted({t for ts in members.values() for t in ts}):
        subs = sorted(mid for mid, ts in members.items() if topic in ts)
        for q in range(queues):
            out[subs[q % len(subs)]].append((topic, q))
    return {mid: sorted(qs) for mid, qs in out.items()}


TOPICS = ["a", "b", "c", "d"]
STEP = st.tuples(st.sampled_from(["join", "leave", "tick", "drop", "beat"]),
                 st.integers(0, 6), st.sets(st.sampled_from(TOPICS), min_size=1),
                 st.integers(0, 2))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5), st.lists(STEP, max_size=50))
def test_indexes_agree_with_a_plain_recomputation(queues, steps):
    now = [0.0]
    g = ConsumerGroupCoordinator(queues, session_timeout_ms=1000, clock=lambda: now[0])
    for action, who, subs, owner in steps:
        group = f"g{who % 2}"
        mid = f"m{who}"
        if action in ("join", "beat"):  # join changes topics and owners too
            g.heartbeat(group, mid, sorted(subs), owner) if action == "beat" else \
                g.join(group, mid, sorted(subs), owner)
        elif action == "leave":
            g.leave(group, mid)
        elif action == "drop":
            g.drop_owner(owner)
        elif action == "tick":
            now[0] += 0.6
            g.expire()
        members_seen = set()
        for name, grp in g.groups.items():
            assert grp.members, "an empty group must be removed"
            want = reference_assignment({m: mem.topics for m, mem in grp.members.items()},
                                        queues)
            # The rule's choice (each queue's target) is what a plain recomputation gives;
            # what a member is answered is only what it holds of that (a queue moves to its
            # target once the previous holder released it), and no queue has two holders.
            targets = {m: sorted((topic, q) for topic, owners in grp.owners.items()
                                 for q, owner in enumerate(owners) if owner == m)
                       for m in grp.members}
            assert targets == want
            answered = [key for qs in grp.assignment.values() for key in qs]
            assert len(answered) == len(set(answered)), "a queue answered to two members"
            for m, qs in grp.assignment.items():
                assert set(qs) <= set(want[m])
            members_seen |= {(name, m) for m in grp.members}
        # The side indexes hold exactly the live members.
        assert set(g._by_last_seen) == members_seen
        assert set().union(*g._by_owner.values()) == members_seen if g._by_owner else \
            not members_seen
        for owner_key, keys in g._by_owner.items():
            for name, m in keys:
                assert g.groups[name].members[m].owner == owner_key


def test_a_heartbeat_from_another_connection_moves_the_member_to_it():
    g = ConsumerGroupCoordinator(4, session_timeout_ms=1000, clock=lambda: 0.0)
    mid, _, _ = g.join("g", None, ["t"], owner="old")
    g.heartbeat("g", mid, ["t"], owner="new")
    assert g.drop_owner("old") == []
    assert g.drop_owner("new") == [("g", mid)] and g.groups == {}


def test_limits_refuse_before_changing_anything():
    g = ConsumerGroupCoordinator(4, session_timeout_ms=1000, clock=lambda: 0.0,
                         limits=ConsumerGroupLimits(max_topics_per_member=3, max_members_per_group=2,
                                            max_members_per_connection=2))
    with pytest.raises(InvalidArgument, match="max_topics_per_member"):
        g.join("g", None, ["a", "b", "c", "d"], owner=1)
    assert g.groups == {}
    a, _, _ = g.join("g", None, ["a"], owner=1)
    g.join("g", None, ["a"], owner=2)
    with pytest.raises(InvalidArgument, match="max_members_per_group"):
        g.join("g", None, ["a"], owner=3)
    g.join("h", None, ["a"], owner=1)
    with pytest.raises(InvalidArgument, match="max_members_per_connection"):
        g.join("i", None, ["a"], owner=1)
    g.join("h", None, ["a"], owner=2)
    with pytest.raises(InvalidArgument, match="max_members_per_connection"):
        g.heartbeat("g", a, ["a"], owner=2)  # taking over a member counts too
    assert g.groups["g"].members[a].owner == 1
    assert sorted(g.groups) == ["g", "h"] and len(g.groups["g"].members) == 2
