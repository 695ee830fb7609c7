"""A primary's consumer groups when the routes change (docs/cluster.md, "Consumer groups
across broker groups"): a topic's queue base or count changing gives its groups a new
generation assigned by the new layout; nothing changing keeps the generation."""

from __future__ import annotations

from fmq.server.ops.consumer_groups import ConsumerGroupCoordinator


def _coordinator(layout: dict[str, int]) -> ConsumerGroupCoordinator:
    return ConsumerGroupCoordinator(lambda _t: layout["count"], 10_000, clock=lambda: 0.0,
                                    queue_base=lambda _t: layout["base"])


def test_a_new_base_rebalances_by_global_index():
    layout = {"base": 0, "count": 3}
    c = _coordinator(layout)
    for m in ("a", "b"):
        c.join("billing", m, ["orders"], owner=m)
    g = c.groups["billing"]
    assert g.owners["orders"] == ["a", "b", "a"]
    assert c.refresh() == []  # nothing changed: same generation
    gen = g.generation
    layout["base"] = 3  # a route gave this group's queues global indices 3..5
    assert c.refresh() == ["billing"]
    assert g.generation == gen + 1
    assert g.owners["orders"] == ["b", "a", "b"]
    assert c.groups["billing"].members["a"].assignment() == [("orders", 1)]


def test_more_queues_are_assigned_at_once():
    layout = {"base": 0, "count": 2}
    c = _coordinator(layout)
    c.join("billing", "a", ["orders"], owner="a")
    layout["count"] = 4
    assert c.refresh() == ["billing"]
    assert c.groups["billing"].members["a"].assignment() == [("orders", q) for q in range(4)]
