"""Brokers of a cluster hold its routes: two broker groups of one node each (g1, g2), real
etcd, real server processes. Each registers its group, follows the routes, makes its route
entries local topics, answers ROUTE from its copy and refuses with NotHosted, before
storing anything, a request for a queue its group does not host."""

from __future__ import annotations

import os
import time

import pytest

from fmq.coordination.routes import ClusterRoutes
from fmq.errors import InvalidArgument, NotHosted, UnknownTopic
from fmq.message import PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY, Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire
from tests.etcdkit import ETCD, EtcdProcess
from tests.server.harness import ServerProcess, wait_until

from .kit import (
    CLUSTER,
    CONFIG,
    QUEUES_PER_TOPIC,
    REFRESH_BOUND_S,
    call,
    local_queues,
    queue_range,
    route,
    route_version,
    send,
    takes_writes,
    two_groups,
    wait_primary,
)

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with two_groups(tmp_path_factory.mktemp("cluster")) as (store, nodes, _etcd):
        yield store, nodes["g1"], nodes["g2"]


def test_a_route_over_both_groups_is_answered_by_either_node_and_made_local(cluster):
    store, g1, g2 = cluster
    created = store.create("orders", 2, ["g1", "g2"])
    for node in (g1, g2):
        wait_until(lambda n=node: route_version(n, "orders") == created.version,
                   REFRESH_BOUND_S, f"{node.address} to know the route")
        answer = route(node, "orders")
        assert answer["cluster"] == CLUSTER and answer["topic"] == "orders"
        assert [(g["group"], g["queues"], g["permission"], g["base"], g["primary"],
                 g["open_for_writes"]) for g in answer["groups"]] == [
            ("g1", 2, "rw", 0, g1.address, True), ("g2", 2, "rw", 2, g2.address, True)]
        assert all(g["epoch"] >= 1 for g in answer["groups"])
        # The group's own topic, made from the route entry (not by a send).
        wait_until(lambda n=node: local_queues(n, "orders") == 2, REFRESH_BOUND_S,
                   f"{node.address} to make orders local with 2 queues")
    whole = route(g2, "")
    assert whole["cluster"] == CLUSTER and whole["revision"] >= created.version
    assert whole["routes"]["orders"]["version"] == created.version
    assert {g: x["primary"] for g, x in whole["groups"].items()} == {
        "g1": g1.address, "g2": g2.address}


def test_requests_for_queues_this_group_does_not_host_are_refused_before_storing(cluster):
    store, g1, g2 = cluster
    created = store.create("payments", 2, ["g1"])
    for node in (g1, g2):
        wait_until(lambda n=node: route_version(n, "payments") == created.version,
                   REFRESH_BOUND_S, "the route of payments everywhere")
    wait_until(lambda: local_queues(g1, "payments") == 2, REFRESH_BOUND_S, "g1's topic")
    assert send(g1, "payments", b"one", queue_id=1)["result"]["queue_id"] == 1
    before = [queue_range(g1, "payments", q) for q in (0, 1)]

    def refused(node, op, fields, queue_id):
        with pytest.raises(NotHosted) as info:
            call(node, op, fields)
        err = info.value
        assert (err.topic, err.queue_id, err.version) == ("payments", queue_id,
                                                           created.version)
        assert err.group == ("g1" if node is g1 else "g2") and err.retriable

    past = message_to_wire(Message("payments", b"x", queue_id=2))
    refused(g1, Op.SEND, {"message": past}, 2)  # past g1's entry of 2 queues
    refused(g1, Op.SEND_BATCH, {"messages": [message_to_wire(Message("payments", b"ok")),
                                             past]}, 2)
    refused(g1, Op.PREPARE, {"messages": [past], "producer_group": "pg", "tx_id": ""}, 2)
    refused(g1, Op.SEND_AT, {"message": past, "deliver_at": -1, "delay_ms": 10}, 2)
    refused(g1, Op.PULL, {"topic": "payments", "queue_id": 2, "offset": 0,
                          "max_messages": 1, "wait_ms": 0}, 2)
    anywhere = message_to_wire(Message("payments", b"x"))
    refused(g2, Op.SEND, {"message": anywhere}, -1)  # g2 is not in the route
    idempotent = message_to_wire(Message("payments", b"x", properties={
        PRODUCER_ID_PROPERTY: "p1", SEQUENCE_PROPERTY: "0"}))
    refused(g2, Op.SEND_BATCH, {"messages": [idempotent]}, -1)
    refused(g2, Op.QUEUE_RANGE, {"topic": "payments", "queue_id": 0}, 0)
    refused(g2, Op.COMMIT_OFFSET, {"group": "cg", "topic": "payments", "queue_id": 0,
                                   "next_offset": 1}, 0)
    # Nothing stored: g1's queues are as they were and it grew none; g2 has no such topic.
    assert [queue_range(g1, "payments", q) for q in (0, 1)] == before
    assert local_queues(g1, "payments") == 2 and local_queues(g2, "payments") == 0
    # The broker still picks among g1's queues of the entry.
    assert send(g1, "payments", b"picked")["result"]["queue_id"] in (0, 1)


def test_an_expanded_group_takes_writes_within_the_refresh_bound(cluster):
    store, g1, g2 = cluster
    store.create("growing", 2, ["g1"])
    wait_until(lambda: route_version(g2, "growing") > 0, REFRESH_BOUND_S, "g2 to know it")
    with pytest.raises(NotHosted):
        send(g2, "growing")
    expanded = store.expand("growing", "g2", 4)
    started = time.monotonic()

    wait_until(lambda: takes_writes(g2, "growing", 3), REFRESH_BOUND_S,
               "g2 to take writes after the expand")
    assert time.monotonic() - started < REFRESH_BOUND_S
    wait_until(lambda: route_version(g1, "growing") == expanded.version, REFRESH_BOUND_S,
               "g1 to know the expand")
    wait_until(lambda: local_queues(g2, "growing") == 4, REFRESH_BOUND_S, "g2's 4 queues")


def test_a_drained_group_refuses_writes_and_still_serves_pulls(cluster):
    store, g1, g2 = cluster
    store.create("draining", 1, ["g1", "g2"])
    wait_until(lambda: route_version(g2, "draining") > 0, REFRESH_BOUND_S, "g2 to know it")
    # The topic's description shows its queue while the queue is being made durable, and
    # a send meanwhile is refused with the retriable NotHosted (storing nothing): the first
    # write is retried as a client does, until g2 takes it.
    taken: list[dict] = []

    def first_send_taken() -> bool:
        try:
            taken.append(send(g2, "draining", b"before the drain", queue_id=0)["result"])
            return True
        except NotHosted:
            time.sleep(0.1)
            return False

    wait_until(first_send_taken, REFRESH_BOUND_S, "g2 to take the first write")
    stored = taken[0]
    drained = store.drain("draining", "g2")

    def g2_refuses() -> bool:
        try:
            send(g2, "draining", b"after", queue_id=0)
        except NotHosted as exc:
            return exc.version == drained.version
        return False

    wait_until(g2_refuses, REFRESH_BOUND_S, "g2 to refuse writes after the drain")
    held = queue_range(g2, "draining", 0)  # sends before g2 saw the drain were taken
    with pytest.raises(NotHosted):
        send(g2, "draining", b"refused", queue_id=0)
    assert queue_range(g2, "draining", 0) == held  # the refused send stored nothing
    pulled = call(g2, Op.PULL, {"topic": "draining", "queue_id": 0, "offset": 0,
                                "max_messages": 100, "wait_ms": 0})
    bodies = [m["body"] for m in pulled["messages"]]
    assert bodies[0] == b"before the drain" and stored["queue_offset"] == 0
    assert len(bodies) == held[1] and b"refused" not in bodies
    assert send(g1, "draining", b"g1 still writes")["result"]["queue_id"] == 0


def test_route_of_an_unknown_topic_creates_it_over_every_writable_group(cluster):
    store, g1, g2 = cluster
    answer = route(g2, "fresh")
    assert [(g["group"], g["queues"]) for g in answer["groups"]] == [
        ("g1", QUEUES_PER_TOPIC), ("g2", QUEUES_PER_TOPIC)]
    assert answer["version"] == store.get("fresh").version
    # The primary answering made its entry local first: a send right after finds it.
    assert local_queues(g2, "fresh") == QUEUES_PER_TOPIC
    assert send(g2, "fresh", queue_id=QUEUES_PER_TOPIC - 1)["result"]["queue_id"] == 2
    assert route(g2, "fresh")["version"] == answer["version"]  # asked again: the same
    for node in (g1, g2):
        wait_until(lambda n=node: local_queues(n, "fresh") == QUEUES_PER_TOPIC,
                   REFRESH_BOUND_S, f"{node.address} to make fresh local")


def test_route_refuses_bad_names_and_answers_internal_topics_as_the_group_own(cluster):
    store, g1, g2 = cluster
    for bad in ("no spaces", "x" * 200, "slash/y"):
        with pytest.raises(InvalidArgument):
            route(g1, bad)
    internal = route(g1, "%DLQ%billing")
    assert internal["version"] == 0
    assert [(g["group"], g["primary"]) for g in internal["groups"]] == [("g1", "")]
    assert store.snapshot().routes.keys().isdisjoint({"%DLQ%billing", "no spaces"})


def test_with_auto_create_off_route_of_an_unknown_topic_is_unknown(tmp_path):
    etcd = EtcdProcess(str(tmp_path / "etcd")).start()
    node = None
    try:
        config = {**CONFIG, "auto_create_topics": False}
        node = ServerProcess(str(tmp_path / "g1"), config, extra_args=(
            "--coordinator", etcd.url, "--cluster-name", CLUSTER, "--group", "g1")).start()
        wait_primary(node)
        with pytest.raises(UnknownTopic):
            route(node, "nobody-made-it")
        assert ClusterRoutes(etcd.url, CLUSTER).get("nobody-made-it") is None
    finally:
        if node is not None:
            node.kill()
        etcd.stop()
