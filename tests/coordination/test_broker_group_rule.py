"""The rule that lets a node take a free leader lease (fmq.coordination.broker_group.may_take_lease):
enough reports that one of them holds every acknowledged write, and no one holding more."""

from __future__ import annotations

from fmq.coordination.broker_group import NodeReport, may_take_lease

NODES = {"a": "h:1", "b": "h:2", "c": "h:3"}


def reports(*rows: tuple[str, int, int]) -> dict[str, NodeReport]:
    return {n: NodeReport(n, NODES.get(n, "h:9"), e, d) for n, e, d in rows}


def test_three_nodes_min_insync_one_need_both_followers():
    # F = 2 followers, min_insync 1: 2 - 1 + 1 = 2 reports needed.
    ok, why = may_take_lease("b", NODES, reports(("b", 1, 500)), 1)
    assert not ok and "only 1 of the 3" in why
    assert may_take_lease("b", NODES, reports(("b", 1, 500), ("c", 1, 400)), 1)[0]


def test_min_insync_two_needs_one_report():
    assert may_take_lease("b", NODES, reports(("b", 1, 500)), 2)[0]


def test_the_node_holding_more_wins():
    both = reports(("b", 1, 500), ("c", 1, 600))
    ok, why = may_take_lease("b", NODES, both, 1)
    assert not ok and "c holds more" in why
    assert may_take_lease("c", NODES, both, 1)[0]
    # A newer epoch beats a longer log of an older term.
    newer = reports(("b", 2, 100), ("c", 1, 600))
    assert may_take_lease("b", NODES, newer, 1)[0]
    assert not may_take_lease("c", NODES, newer, 1)[0]


def test_ties_go_to_the_lowest_name():
    tie = reports(("b", 1, 500), ("c", 1, 500))
    assert may_take_lease("b", NODES, tie, 1)[0]
    assert not may_take_lease("c", NODES, tie, 1)[0]


def test_unregistered_reports_do_not_count_and_own_report_is_needed():
    stray = reports(("b", 1, 500), ("x", 1, 900))
    assert not may_take_lease("b", NODES, stray, 1)[0]  # x is not in the registry
    assert not may_take_lease("a", NODES, reports(("b", 1, 5), ("c", 1, 5)), 1)[0]


def test_a_first_node_alone_may_lead():
    assert may_take_lease("a", {"a": "h:1"}, reports(("a", 0, 0)), 1)[0]


def test_reports_from_before_the_vacancy_do_not_count():
    """A node that died after its last report left it in etcd for a moment: it says
    nothing about what that node held when it died."""
    rows = {"b": NodeReport("b", "h:2", 1, 500, revision=20),
            "c": NodeReport("c", "h:3", 1, 400, revision=9)}
    ok, why = may_take_lease("b", NODES, rows, 1, since_revision=10)
    assert not ok and "only 1 of the 3" in why
    assert may_take_lease("b", NODES, rows, 1, since_revision=8)[0]
