"""Routing producers against a real cluster: a real etcd, broker groups of one node each as
real ``fmq server`` processes, routes changed with ClusterRoutes while producers send
(docs/client.md, "Routing over broker groups")."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from fmq.client import Producer, SpansGroups, TransactionProducer
from fmq.client.aio import AsyncProducer
from fmq.errors import DeliveryTimeout, FMQError
from fmq.message import Message
from fmq.topic_route import key_slot, queue_for_key
from fmq.tx.state import TxState
from tests.etcdkit import ETCD
from tests.server.harness import wait_until

from .kit import (
    known_everywhere,
    queue_range,
    start_node,
    two_groups,
    wait_primary,
)

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("client-cluster")
    with two_groups(tmp) as (store, nodes, etcd):
        yield store, nodes, etcd, tmp


def stored_count(node, topic, queues):
    return sum(queue_range(node, topic, q)[1] for q in range(queues))


def test_unkeyed_sends_spread_over_both_groups_and_a_key_keeps_its_queue(cluster):
    store, nodes, _etcd, _tmp = cluster
    route = store.create("c-spread", 2, ["g1", "g2"])
    known_everywhere(nodes, "c-spread", route.version)
    servers = ",".join(n.address for n in nodes.values())
    with Producer(servers, linger_ms=1) as p:
        results = [p.send("c-spread", f"u{i}".encode()) for i in range(12)]
        assert {(r.group, r.queue_id) for r in results} == {
            (g, q) for g in ("g1", "g2") for q in range(2)}
        keyed = {(r.group, r.queue_id) for r in
                 (p.send("c-spread", b"k", key="customer-7") for _ in range(8))}
        expected = queue_for_key(route, "customer-7")
        assert keyed == {(expected.group, expected.queue_id)}
        futs = [p.send_async("c-spread", f"a{i}".encode()) for i in range(40)]
        p.flush(60)
        assert {f.result().group for f in futs} == {"g1", "g2"}
    counts = {g: stored_count(n, "c-spread", 2) for g, n in nodes.items()}
    assert sum(counts.values()) == 12 + 8 + 40 and all(counts.values())


def test_a_stale_route_gets_not_hosted_and_the_producer_carries_on(cluster):
    store, nodes, _etcd, _tmp = cluster
    first = store.create("c-moving", 2, ["g1"])
    known_everywhere(nodes, "c-moving", first.version)
    servers = ",".join(n.address for n in nodes.values())
    sent: list = []
    errors: list[BaseException] = []
    stop = threading.Event()
    with Producer(servers, route_refresh_s=3600, delivery_timeout=60) as p:
        assert p.send("c-moving", b"first").group == "g1"

        def keep_sending():
            i = 0
            while not stop.is_set():
                try:
                    sent.append(p.send("c-moving", f"m{i}".encode()))
                except FMQError as exc:  # pragma: no cover - the assertion below says it
                    errors.append(exc)
                i += 1

        sender = threading.Thread(target=keep_sending)
        sender.start()
        try:
            grown = store.expand("c-moving", "g2", 2)
            known_everywhere(nodes, "c-moving", grown.version)
            drained = store.drain("c-moving", "g1")  # the producer's route is now stale
            known_everywhere(nodes, "c-moving", drained.version)
            wait_until(lambda: len(sent) > 0 and sent[-1].group == "g2", 30,
                       "sends to reach g2 after g1 was drained")
            before = len(sent)
            wait_until(lambda: len(sent) > before + 20, 30, "sends to go on")
        finally:
            stop.set()
            sender.join(90)
        assert not errors
        assert p.routes.refusals > 0  # the stale route was refused, and the sends went on
        assert {r.group for r in sent[before:]} == {"g2"}  # g1 is read-only now
        # send_async: the buffered batches' group refuses them; they go to g2.
        reopened = store.reopen("c-moving", "g1")
        known_everywhere(nodes, "c-moving", reopened.version)
        p.routes.not_hosted("c-moving")  # read once: g1 writable again
        p.send("c-moving", b"refresh")
        drained = store.drain("c-moving", "g1")
        known_everywhere(nodes, "c-moving", drained.version)
        refused = p.routes.refusals
        futs = [p.send_async("c-moving", f"a{i}".encode()) for i in range(30)]
        p.flush(60)
        assert {f.result().group for f in futs} == {"g2"}
        assert p.routes.refusals > refused  # batches bound for g1 were refused, then moved
    assert stored_count(nodes["g2"], "c-moving", 2) >= 30 + 20


def test_a_transaction_stays_in_one_group_and_one_spanning_groups_is_refused(cluster):
    store, nodes, _etcd, _tmp = cluster
    both = store.create("c-tx", 2, ["g1", "g2"])
    only = store.create("c-tx-g2", 2, ["g2"])
    known_everywhere(nodes, "c-tx", both.version)
    known_everywhere(nodes, "c-tx-g2", only.version)
    servers = ",".join(n.address for n in nodes.values())
    with TransactionProducer(servers, "c-tx-pg", lambda u: TxState.COMMIT,
                             feedback=False) as p:
        with p.transaction(group="g1") as tx:
            for i in range(5):
                tx.send("c-tx", f"t{i}".encode(), key=f"key-{i}")
        assert tx.result.state == TxState.COMMIT
        assert stored_count(nodes["g1"], "c-tx", 2) == 5
        assert stored_count(nodes["g2"], "c-tx", 2) == 0
        for i in range(5):  # keys hash over g1's own queues of the topic
            assert queue_range(nodes["g1"], "c-tx", key_slot(f"key-{i}", 2))[1] >= 1
        with pytest.raises(SpansGroups, match="c-tx-g2 has no writable queue in broker group g1"):
            p.send_in_transaction([Message("c-tx", b"x"), Message("c-tx-g2", b"y")],
                                  lambda tx_id, arg: TxState.COMMIT, group="g1")
    assert stored_count(nodes["g1"], "c-tx", 2) == 5  # nothing of it stored anywhere
    assert stored_count(nodes["g2"], "c-tx-g2", 2) == 0


def test_killing_one_groups_node_leaves_sends_to_the_other_group_going(cluster):
    store, _nodes, etcd, tmp = cluster
    nodes = {g: start_node(tmp, etcd, g) for g in ("g3", "g4")}
    try:
        for node in nodes.values():
            wait_primary(node)
        wait_until(lambda: {"g3", "g4"} <= {g for g, x in store.groups().items()
                                              if x.primary}, 30, "g3 and g4 registered")
        route = store.create("c-kill", 2, ["g3", "g4"])
        known_everywhere(nodes, "c-kill", route.version)
        with Producer(nodes["g3"].address, delivery_timeout=4, request_timeout=2) as p:
            assert {p.send("c-kill", b"before").group for _ in range(8)} == {"g3", "g4"}
            nodes["g4"].kill()
            ok, failed = [], 0
            deadline = time.monotonic() + 90
            while len(ok) < 40 and time.monotonic() < deadline:
                try:
                    ok.append(p.send("c-kill", b"after"))
                except DeliveryTimeout:
                    failed += 1
            assert len(ok) == 40 and {r.group for r in ok} == {"g3"}
            # (a send caught on g4 waits out its deadline: ``failed``; the rest skip g4)
    finally:
        for node in nodes.values():
            node.kill()


def test_the_asyncio_producer_spreads_and_carries_on_through_not_hosted(cluster):
    store, nodes, _etcd, _tmp = cluster
    first = store.create("c-aio", 2, ["g1", "g2"])
    known_everywhere(nodes, "c-aio", first.version)
    servers = ",".join(n.address for n in nodes.values())

    async def produce():
        async with AsyncProducer(servers, linger_ms=1, route_refresh_s=3600) as p:
            spread = [await p.send("c-aio", f"s{i}".encode()) for i in range(8)]
            drained = store.drain("c-aio", "g2")  # the producer's route is stale now
            await asyncio.to_thread(known_everywhere, nodes, "c-aio", drained.version)
            after = [await p.send("c-aio", f"d{i}".encode()) for i in range(4)]
            refused = p.router.table.refusals
            reopened = store.reopen("c-aio", "g2")
            await asyncio.to_thread(known_everywhere, nodes, "c-aio", reopened.version)
            p.router.table.not_hosted("c-aio")
            await p.send("c-aio", b"refresh")  # g2 writable again in the producer's route
            drained = store.drain("c-aio", "g2")
            await asyncio.to_thread(known_everywhere, nodes, "c-aio", drained.version)
            futs = [await p.send_async("c-aio", f"a{i}".encode()) for i in range(30)]
            await p.flush(60)
            return spread, after, refused, [f.result() for f in futs], p.router.table.refusals

    spread, after, refused, batched, refusals = asyncio.run(asyncio.wait_for(produce(), 180))
    assert {r.group for r in spread} == {"g1", "g2"}
    assert refused > 0 and {r.group for r in after} == {"g1"}
    assert refusals > refused + 1 and {r.group for r in batched} == {"g1"}
