"""A producer's routing choices (fmq/client/cluster/placement.py and route_table.py), pure:
which broker group and queue each message goes to, and when the route table reads a route
again."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fmq.client.cluster.placement import (
    SpansGroups,
    choose_queue,
    keyed_queue,
    named_queue,
    place_batch,
    place_in_group,
    unkeyed_queue,
)
from fmq.client.cluster.route_table import Route, RouteTable, knows_no_route, parse_route
from fmq.errors import InvalidArgument, ProtocolError, RouteConflict
from fmq.topic_route import BrokerGroup, QueueRef, drain, expand, key_slot, new_route

GROUPS = ["g1", "g2", "g3"]


def cluster(route, primaries=None, closed=()):
    primaries = primaries or {g: f"127.0.0.1:{9000 + i}" for i, g in enumerate(route.groups)}
    return Route("c1", route, {g: BrokerGroup(g, primaries.get(g, ""), 1, g not in closed)
                               for g in route.groups})


routes = st.builds(
    lambda n, q, extra, drained: _route(n, q, extra, drained),
    st.integers(1, 3), st.integers(1, 6), st.integers(0, 5), st.integers(0, 2))


def _route(n, q, extra, drained):
    r = new_route("orders", GROUPS[:n], q)
    if extra:
        r = expand(r, "g4", extra)
    if drained < n and (n > 1 or extra):  # never the last writable group
        r = drain(r, GROUPS[drained])
    return cluster(r)


@given(st.text(min_size=1, max_size=40), st.integers(1, 64))
def test_a_one_group_route_hashes_a_key_to_the_queue_a_single_broker_picks(key, queues):
    route = cluster(new_route("orders", ["g1"], queues))
    assert keyed_queue(route, key) == QueueRef("g1", key_slot(key, queues))


@given(routes, st.sets(st.sampled_from([*GROUPS, "g4"])), st.integers(0, 1000))
def test_unkeyed_sends_go_round_robin_over_writable_queues_of_groups_not_skipped(
        route, skipped, start):
    writable = [(e.group, q) for e in sorted(route.route.entries, key=lambda e: e.base)
                if e.writable for q in range(e.queues)]
    eligible = [w for w in writable if w[0] not in skipped] or writable
    picked = [unkeyed_queue(route, start + i, skipped) for i in range(len(eligible))]
    assert sorted((p.group, p.queue_id) for p in picked) == sorted(eligible)


@given(routes, st.sets(st.sampled_from(GROUPS)), st.text(min_size=1, max_size=20))
def test_a_key_keeps_its_queue_whatever_group_is_in_a_back_off(route, skipped, key):
    assert choose_queue(route, key, None, None, 0, skipped) == keyed_queue(route, key)
    assert route.route.entry(keyed_queue(route, key).group).writable


def test_a_group_without_a_primary_or_closed_gets_no_unkeyed_sends():
    base = new_route("orders", ["g1", "g2", "g3"], 2)
    route = cluster(base, primaries={"g1": "h:1", "g3": "h:3"}, closed={"g3"})
    assert {unkeyed_queue(route, i).group for i in range(20)} == {"g1"}


def test_a_route_with_no_writable_group_is_refused():
    base = new_route("orders", ["g1"], 2)
    stuck = Route("c1", base.__class__(base.topic, tuple(
        e.__class__(e.group, e.queues, "ro", e.base) for e in base.entries), base.next_index))
    with pytest.raises(RouteConflict):
        unkeyed_queue(stuck, 0)


@given(routes, st.data())
def test_a_named_queue_is_a_global_index_or_a_groups_local_id(route, data):
    index, ref = data.draw(st.sampled_from(route.route.queues()))
    assert named_queue(route, index) == ref
    assert named_queue(route, ref.queue_id, ref.group) == ref
    with pytest.raises(InvalidArgument):
        named_queue(route, route.route.next_index + 1)


@given(routes, st.lists(st.one_of(st.none(), st.text(min_size=1, max_size=8)), min_size=1,
                        max_size=8), st.integers(0, 50))
def test_a_batch_lies_in_one_group_or_is_refused(route, keys, turn):
    n = len(keys)
    try:
        refs = place_batch([route] * n, keys, [None] * n, None, turn)
    except SpansGroups:
        groups = {keyed_queue(route, k).group for k in keys if k}
        assert len(groups) > 1
        return
    assert len({r.group for r in refs}) == 1
    for k, r in zip(keys, refs, strict=True):
        if k:
            assert r == keyed_queue(route, k)


@given(routes, st.lists(st.one_of(st.none(), st.text(min_size=1, max_size=8)), min_size=1,
                        max_size=8), st.sampled_from([*GROUPS, "g4"]))
def test_a_transaction_stays_in_its_group_or_is_refused_before_sending(route, keys, group):
    n = len(keys)
    entry = route.route.entry(group)
    if entry is None or not entry.writable:
        with pytest.raises(SpansGroups, match=f"no writable queue in broker group {group}"):
            place_in_group([route] * n, group, keys, [None] * n, 0)
        return
    refs = place_in_group([route] * n, group, keys, [None] * n, 0)
    assert {r.group for r in refs} == {group}
    for k, r in zip(keys, refs, strict=True):
        if k:  # keys hash over the group's own queues of the topic
            assert r.queue_id == key_slot(k, entry.queues)


def test_the_route_of_a_node_outside_a_cluster_is_single():
    answer = {"cluster": "", "topic": "t", "version": 0,
              "groups": [{"group": "default", "queues": 4, "permission": "rw", "base": 0,
                          "primary": "", "epoch": 0, "open_for_writes": True}]}
    route = parse_route(json.dumps(answer))
    assert route.single and route.broker_group_name() == "default" and route.version == 0
    answer["cluster"] = "c1"
    assert not parse_route(json.dumps(answer)).single
    with pytest.raises(ProtocolError):
        parse_route('{"cluster": ""}')
    assert knows_no_route(ProtocolError("unknown opcode 65; this server knows [1, 2]"))
    assert not knows_no_route(ProtocolError("unknown opcode 66"))


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_table_reads_again_on_not_hosted_at_most_once_per_gap_and_on_its_period():
    clock = Clock()
    table = RouteTable(refresh_s=30, min_gap_s=0.005, backoff_s=1, clock=clock)
    assert table.current("t") is None
    v5 = cluster(new_route("t", ["g1", "g2"], 2).__class__(
        "t", new_route("t", ["g1", "g2"], 2).entries, 4, 5))
    table.store("t", v5)
    assert table.current("t") is v5
    table.not_hosted("t")
    assert table.current("t") is v5  # read a moment ago: a burst of refusals reads once
    clock.now += 0.01
    assert table.current("t") is None
    table.store("t", v5)
    clock.now += 29
    assert table.current("t") is v5
    clock.now += 2
    assert table.current("t") is None
    older = Route("c1", v5.route.__class__("t", v5.route.entries, 4, 3), v5.broker_groups)
    assert table.store("t", older) is v5  # a lagging node's answer does not go backwards


def test_a_route_naming_a_group_without_a_primary_is_read_again_after_the_back_off():
    """Read during an election, the route leaves that group out of unkeyed sends: the
    table asks again after the back-off, not a refresh period (30 s) later."""
    clock = Clock()
    table = RouteTable(refresh_s=30, backoff_s=1, clock=clock)
    electing = cluster(new_route("t", ["g1", "g2"], 2), {"g2": "127.0.0.1:9001"})
    table.store("t", electing)
    assert table.current("t") is electing
    clock.now += 1.5
    assert table.current("t") is None
    whole = cluster(new_route("t", ["g1", "g2"], 2))
    table.store("t", whole)
    clock.now += 1.5
    assert table.current("t") is whole  # both have a primary: the usual period


def test_an_unreachable_group_is_skipped_for_its_back_off():
    clock = Clock()
    table = RouteTable(refresh_s=30, backoff_s=1, clock=clock)
    table.unreachable("g2", "t")
    assert table.skipped() == {"g2"}
    clock.now += 1.5
    assert table.skipped() == set()
    with pytest.raises(InvalidArgument):
        RouteTable(refresh_s=0)


def test_a_resend_stays_where_it_may_be_stored_and_moves_only_after_a_refusal():
    from fmq.client.acquire import link_of
    from fmq.client.cluster.router import PlacedRequest, Router
    from fmq.errors import (
        ConnectionLost,
        LeadershipLost,
        NotEnoughReplicas,
        NotHosted,
        NotPrimary,
        ServerBusy,
    )

    there = PlacedRequest(link_of("g1"), {}, "g1", ["t"])
    # LeadershipLost: a fenced primary stored it and did not acknowledge it; numbered anew,
    # the resend was stored again (issue 37: 7 copies of each message on every node).
    for maybe_stored in (ConnectionLost("x"), NotEnoughReplicas(0, 1), LeadershipLost("")):
        assert Router.pin(maybe_stored, there, None) is there
    assert Router.pin(NotHosted("t", "g1", 0, 3), there, None) is None  # nothing stored
    # Once a try may have stored it, a later NotHosted does not free it: renumbered and
    # placed elsewhere, it would be stored a second time.
    assert Router.pin(NotHosted("t", "g1", 0, 3), there, there) is there
    assert Router.pin(ServerBusy("x"), there, None) is None  # refused: place anew
    assert Router.pin(NotPrimary("h:1"), there, None) is None  # a follower stores nothing
    single = PlacedRequest("default", {}, "", ["t"])
    assert Router.pin(NotHosted("t", "g1", 0, 3), single, single) is single
