"""A topic's route as a pure value: global indices that never move, key hashing over the
writable queues only, and the rules of expand, drain and remove-group."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.errors import (
    InvalidArgument,
    RouteConflict,
    RouteHasLag,
    UnknownBrokerGroup,
)
from fmq.log.record import crc32c
from fmq.topic_route import (
    READ_ONLY,
    BrokerGroup,
    QueueRef,
    TopicRoute,
    drain,
    expand,
    index_of,
    new_route,
    queue_at,
    queue_for_key,
    remove_group,
    reopen,
    writable_queues,
)

GROUP_NAMES = st.sampled_from([f"g{i}" for i in range(8)])


@st.composite
def routes(draw) -> TopicRoute:
    """A route built the way an operator builds one: create, then expand, drain, remove."""
    first = draw(st.lists(GROUP_NAMES, min_size=1, max_size=3, unique=True))
    route = new_route("orders", first, draw(st.integers(1, 6)))
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["expand", "drain", "remove"]))
        group = draw(GROUP_NAMES)
        try:
            if op == "expand":
                route = expand(route, group, draw(st.integers(1, 6)))
            elif op == "drain":
                route = drain(route, group)
            else:
                route = remove_group(route, group, {}, force=draw(st.booleans()))
        except (RouteConflict, InvalidArgument):
            pass
    return route


@settings(max_examples=200, deadline=None)
@given(routes())
def test_global_index_and_queue_round_trip_and_are_distinct(route):
    pairs = route.queues()
    assert len({i for i, _ in pairs}) == len(pairs) == sum(e.queues for e in route.entries)
    for index, queue in pairs:
        assert queue_at(route, index) == queue
        assert index_of(route, queue) == index
    assert all(i < route.next_index for i, _ in pairs)
    assert TopicRoute.from_json(route.to_json(), route.version) == route


@settings(max_examples=200, deadline=None)
@given(routes(), GROUP_NAMES, st.integers(1, 6))
def test_expanding_never_moves_a_routed_queue(route, group, queues):
    try:
        grown = expand(route, group, queues)
    except RouteConflict:
        assert group in route.groups
        return
    before = dict(route.queues())
    after = dict(grown.queues())
    assert all(after[i] == q for i, q in before.items())
    assert {q.group for i, q in after.items() if i not in before} == {group}


@settings(max_examples=200, deadline=None)
@given(routes(), st.text(min_size=1, max_size=40))
def test_key_hashing_is_stable_and_lands_on_a_writable_routed_queue(route, key):
    queue = queue_for_key(route, key)
    assert queue == queue_for_key(TopicRoute.from_json(route.to_json()), key)
    assert queue in writable_queues(route)
    assert queue in {q for _, q in route.queues()}
    assert route.entry(queue.group).writable


@given(st.integers(1, 64), st.text(min_size=1, max_size=40))
def test_a_route_of_one_group_hashes_a_key_as_a_single_broker_does(queues, key):
    route = new_route("orders", ["g1"], queues)
    assert queue_for_key(route, key) == QueueRef("g1", crc32c(key.encode()) % queues)


def test_removed_indices_are_never_given_out_again():
    route = new_route("t", ["a", "b"], 4)
    route = remove_group(drain(route, "a"), "a", {})
    route = expand(route, "c", 2)
    assert [(i, q.group) for i, q in route.queues()] == [
        (4, "b"), (5, "b"), (6, "b"), (7, "b"), (8, "c"), (9, "c")]
    route = expand(route, "a", 3)  # a group may come back, at new indices
    assert index_of(route, QueueRef("a", 0)) == 10
    with pytest.raises(InvalidArgument, match="no queue with global index 0"):
        queue_at(route, 0)


def test_drain_stops_writes_keeps_reads_and_refuses_the_last_writable_group():
    route = new_route("t", ["a", "b"], 2)
    drained = drain(route, "a")
    assert drained.entry("a").permission == READ_ONLY
    assert writable_queues(drained) == [QueueRef("b", 0), QueueRef("b", 1)]
    assert len(drained.queues()) == 4  # still read
    assert drain(drained, "a") is drained  # nothing to write
    with pytest.raises(RouteConflict, match="last that takes its writes"):
        drain(drained, "b")
    assert reopen(drained, "a") == route
    with pytest.raises(RouteConflict, match="holds no queues"):
        drain(route, "zz")


def test_writable_queues_skip_groups_without_a_primary_or_closed():
    route = new_route("t", ["a", "b", "c"], 1)
    groups = {"a": BrokerGroup("a", "h:1"), "b": BrokerGroup("b", ""),
              "c": BrokerGroup("c", "h:3", open_for_writes=False)}
    assert writable_queues(route, groups) == [QueueRef("a", 0)]
    # Key hashing ignores a group's primary: a fail-over must not move keys.
    assert len(writable_queues(route)) == 3


def test_remove_group_is_refused_while_lag_remains_unless_forced():
    route = drain(new_route("t", ["a", "b"], 2), "a")
    with pytest.raises(RouteHasLag) as refused:
        remove_group(route, "a", {"billing": 3, "audit": 0, "ship": 1})
    assert refused.value.lag == "billing: 3 unread, ship: 1 unread"
    assert refused.value.group == "a" and refused.value.topic == "t"
    assert remove_group(route, "a", {"billing": 3}, force=True).groups == ("b",)
    assert remove_group(route, "a", {"billing": 0}).groups == ("b",)
    with pytest.raises(RouteConflict, match="drain it first"):
        remove_group(new_route("t", ["a", "b"], 2), "a", {})
    with pytest.raises(RouteConflict, match="only group"):
        remove_group(new_route("t", ["a"], 2), "a", {}, force=True)


@pytest.mark.parametrize("topic,groups,queues,match", [
    ("t", ["a"], 0, "queues per broker group must be 1..65535"),
    ("t", ["a"], 10**6, "queues per broker group must be 1..65535"),
    ("t", ["a"], True, "queues per broker group"),
    ("t", [], 1, "at least one broker group"),
    ("t", ["a", "a"], 1, "twice"),
    ("t", ["a/b"], 1, "broker group name"),
    ("%RETRY%billing", ["a"], 1, "FMQ's own"),
    ("bad topic", ["a"], 1, "topic"),
])
def test_bad_routes_are_refused_with_a_clear_error(topic, groups, queues, match):
    with pytest.raises(InvalidArgument, match=match):
        new_route(topic, groups, queues)


def test_a_group_the_cluster_lacks_is_refused():
    with pytest.raises(UnknownBrokerGroup) as refused:
        new_route("t", ["a", "x"], 1, known=["a", "b"], cluster="prod")
    assert (refused.value.group, refused.value.cluster, refused.value.known) == (
        "x", "prod", "a, b")
    with pytest.raises(UnknownBrokerGroup):
        expand(new_route("t", ["a"], 1), "x", 1, known=["a"], cluster="prod")


@pytest.mark.parametrize("text", [
    b"", b"{}", b'{"format": 2}',
    b'{"format":1,"topic":"t","next_index":2,"groups":[{"group":"a","queues":2,'
    b'"permission":"rw","base":0},{"group":"b","queues":2,"permission":"rw","base":1}]}',
    b'{"format":1,"topic":"t","next_index":1,"groups":[{"group":"a","queues":2,'
    b'"permission":"rw","base":0}]}',
    b'{"format":1,"topic":"t","next_index":2,"groups":[{"group":"a","queues":2,'
    b'"permission":"wr","base":0}]}',
])
def test_a_damaged_stored_route_is_refused_whole(text):
    with pytest.raises(InvalidArgument):
        TopicRoute.from_json(text)
