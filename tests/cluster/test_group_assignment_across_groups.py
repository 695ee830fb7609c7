"""Consumer groups over several broker groups: each group's primary assigns its own queues
by one rule (global index mod members, docs/cluster.md), so members that joined every broker
group with the same ids get the whole topic spread evenly, each queue one owner."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.server.ops.consumer_groups import ConsumerGroupCoordinator

TOPIC = "orders"


def _coordinators(counts: list[int]) -> list[ConsumerGroupCoordinator]:
    """One coordinator per broker group, its queues at the bases a route gives them."""
    bases = [sum(counts[:i]) for i in range(len(counts))]
    return [ConsumerGroupCoordinator(lambda _t, n=n: n, 10_000, clock=lambda: 0.0,
                                     queue_base=lambda _t, b=b: b)
            for n, b in zip(counts, bases, strict=True)]


def _owned(coordinators: list[ConsumerGroupCoordinator], counts: list[int],
           members: list[str]) -> dict[str, list[int]]:
    """Each member's global queue indices, after it joined every broker group."""
    owned: dict[str, list[int]] = {m: [] for m in members}
    for c in coordinators:
        for m in members:
            c.join("billing", m, [TOPIC], owner=m)
    for i, c in enumerate(coordinators):
        base = sum(counts[:i])
        for m in members:
            _, _, assignment = c.join("billing", m, [TOPIC], owner=m)
            owned[m].extend(base + q for _, q in assignment)
    return owned


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(1, 9), min_size=1, max_size=4),
       members=st.lists(st.text("abcdef", min_size=1, max_size=4), min_size=1, max_size=7,
                        unique=True))
def test_every_queue_has_one_owner_and_the_topic_is_spread_evenly(counts, members):
    owned = _owned(_coordinators(counts), counts, members)
    every = sorted(q for qs in owned.values() for q in qs)
    assert every == list(range(sum(counts)))  # each global queue exactly once
    sizes = [len(qs) for qs in owned.values()]
    assert max(sizes) - min(sizes) <= 1  # as even as one group of sum(counts) queues


def test_without_bases_each_group_would_give_its_first_queues_to_the_same_member():
    """The reason for the base: with queue ids alone, two groups of 1 queue each give
    both queues to the first member and none to the second."""
    counts, members = [1, 1], ["a", "b"]
    plain = [ConsumerGroupCoordinator(1, 10_000, clock=lambda: 0.0) for _ in counts]
    for c in plain:
        for m in members:
            c.join("billing", m, [TOPIC], owner=m)
    firsts = [c.groups["billing"].owners[TOPIC][0] for c in plain]
    assert firsts == ["a", "a"]
    owned = _owned(_coordinators(counts), counts, members)
    assert owned == {"a": [0], "b": [1]}
