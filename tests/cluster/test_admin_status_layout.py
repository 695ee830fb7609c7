"""``fmq cluster status --server`` reads a node's ROUTE answer for every route (topic ""):
the status is built from that documented layout (docs/protocol.md, ROUTE) the same way as
from etcd, and an answer in another layout is a clear error, not a traceback."""

from __future__ import annotations

import pytest

from fmq.coordination.cluster_status import cluster_status
from fmq.coordination.route_lag import GroupsAnswer
from fmq.errors import InvalidArgument
from fmq.topic_route import BrokerGroup

#: ROUTE's answer for topic "", as docs/protocol.md gives it.
VIEW = {
    "cluster": "prod", "revision": 42,
    "routes": {"orders": {"cluster": "prod", "topic": "orders", "version": 40, "groups": [
        {"group": "g1", "queues": 2, "permission": "ro", "base": 0, "primary": "h1:1",
         "epoch": 3, "open_for_writes": True},
        {"group": "g2", "queues": 2, "permission": "rw", "base": 2, "primary": "",
         "epoch": 0, "open_for_writes": True}]}},
    "groups": {"g1": {"primary": "h1:1", "epoch": 3, "open_for_writes": True},
               "g2": {"primary": "", "epoch": 0, "open_for_writes": False}},
}

#: g1's primary's GROUPS offsets: queue 5 is g1's own, outside the route's two queues.
G1_OFFSETS = [
    {"group": "billing", "topic": "orders", "queue_id": 1, "committed": 3, "min_offset": 0,
     "next_offset": 7, "lag": 4, "lag_ms": 10, "owner": None},
    {"group": "billing", "topic": "orders", "queue_id": 5, "committed": 0, "min_offset": 0,
     "next_offset": 9, "lag": 9, "lag_ms": 10, "owner": None},
    {"group": "billing", "topic": "other", "queue_id": 0, "committed": 0, "min_offset": 0,
     "next_offset": 1, "lag": 1, "lag_ms": 10, "owner": None},
]


#: g1's queue ranges: its queue 0 of orders, where billing never committed, holds 5.
G1_QUEUES = {("orders", 0): (0, 5), ("orders", 1): (0, 7), ("orders", 5): (0, 9),
             ("other", 0): (0, 1)}


def g1_only(group: BrokerGroup) -> GroupsAnswer:
    assert group.name == "g1" and group.primary == "h1:1"  # g2 has no primary to ask
    return GroupsAnswer(G1_OFFSETS, G1_QUEUES)


def test_status_from_a_route_answer_for_every_route():
    s = cluster_status(VIEW, g1_only)
    assert (s["cluster"], s["revision"]) == ("prod", 42)
    assert s["groups"] == [
        {"group": "g1", "primary": "h1:1", "epoch": 3, "open_for_writes": True,
         "registered": True, "reachable": True, "error": ""},
        {"group": "g2", "primary": "", "epoch": 0, "open_for_writes": False,
         "registered": True, "reachable": False, "error": "no primary now"}]
    assert s["routes"] == [{"topic": "orders", "version": 40, "groups": [
        {"group": "g1", "queues": 2, "permission": "ro", "base": 0, "last_index": 1},
        {"group": "g2", "queues": 2, "permission": "rw", "base": 2, "last_index": 3}]}]
    # billing committed in orders, so it subscribes to all of it: queue 0 counts too.
    assert s["lag"] == [{"group": "g1", "topic": "orders", "queue_id": 0, "global_index": 0,
                         "consumer_group": "billing", "committed": None, "next_offset": 5,
                         "lag": 5},
                        {"group": "g1", "topic": "orders", "queue_id": 1, "global_index": 1,
                         "consumer_group": "billing", "committed": 3, "next_offset": 7,
                         "lag": 4}]


@pytest.mark.parametrize("view", [
    {"cluster": "prod", "revision": 1, "routes": {"t": {"groups": [{"group": "g1"}]}},
     "groups": {}},
    {"cluster": "prod", "revision": 1, "routes": [], "groups": {}},
    {"cluster": "prod"},
])
def test_an_answer_in_another_layout_is_a_clear_error(view):
    with pytest.raises(InvalidArgument, match="not in ROUTE's layout"):
        cluster_status(view, g1_only)
