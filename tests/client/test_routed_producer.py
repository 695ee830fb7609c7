"""Routing producers against real servers (docs/client.md, "Routing").

One node: the producer reads the topic's route once (ROUTE answers a single group) and
sends as before, the server picking the queue. Two groups: two real one-node servers stand
for two broker groups of a cluster; the route naming them is handed to the producer's route
table, as a cluster's ROUTE answer would be (the route itself is the brokers' part), and
everything else is real: one link per group, sends, batches, transactions and a kill -9."""

from __future__ import annotations

import asyncio
import time

import pytest

from fmq.client import Client, Producer, SpansGroups, TransactionProducer
from fmq.client.acquire import link_of
from fmq.client.aio import AsyncProducer
from fmq.client.cluster.route_table import Route
from fmq.client.discovery import address_of
from fmq.errors import DeliveryTimeout, OffsetOutOfRange
from fmq.message import Message
from fmq.topic_route import BrokerGroup, key_slot, new_route
from fmq.tx.state import TxState

from .conftest import FAST

QUEUES = 4  # the servers' queues_per_topic default: a route's queue count per group


def route_of(topic: str, servers: dict, version: int = 7) -> Route:
    """The route a cluster of ``servers`` (group -> ServerProcess) answers for ``topic``."""
    base = new_route(topic, list(servers), QUEUES)
    return Route("c1", base.__class__(topic, base.entries, base.next_index, version),
                 {g: BrokerGroup(g, s.address, 1) for g, s in servers.items()})


def hand_over(producer: Producer | AsyncProducer, route: Route) -> None:
    """Give ``producer`` the route as ROUTE would, and its groups' links."""
    producer.router.table.store(route.route.topic, route)
    producer.router.table.refresh_s = 3600.0  # the servers here answer single routes
    for name, broker_group in route.broker_groups.items():
        producer.links.seed(link_of(name), address_of(broker_group.primary))


def stored(server, topic: str, queue_id: int, offset: int) -> bytes | None:
    with Client(server.address, retries=3) as c:
        try:
            return c.get_message(topic, queue_id, offset).body
        except OffsetOutOfRange:
            return None


def test_one_node_route_is_read_once_and_keyed_sends_keep_todays_queues(start_server):
    srv = start_server(FAST)
    with Producer(srv.address) as p:
        first = p.send("orders", b"x", key="k-0")
        route = p.routes.held("orders")
        assert route is not None and route.single and route.version == 0
        for i in range(30):
            key = f"k-{i}"
            r = p.send("orders", f"m{i}".encode(), key=key)
            assert r.queue_id == key_slot(key, QUEUES)  # the server's own placement
            assert r.group == route.broker_group_name() != ""
        assert p.routes.held("orders") is route  # not read again for each send
        results = p.send_batch([Message("orders", b"b1", key="k-1"),
                                Message("orders", b"b2", key="k-2")])
        assert [r.queue_id for r in results] == [key_slot("k-1", QUEUES),
                                                 key_slot("k-2", QUEUES)]
        fut = p.send_async("orders", b"a", key="k-3")
        p.flush(30)
        assert fut.result().queue_id == key_slot("k-3", QUEUES)
        assert first.group == route.broker_group_name()


def test_two_groups_spread_unkeyed_keep_keys_and_batches_in_one_group(start_server):
    a, b = start_server(FAST, name="a"), start_server(FAST, name="b")
    groups = {"g1": a, "g2": b}
    with Producer(a.address, linger_ms=1) as p:
        hand_over(p, route_of("orders", groups))
        spread = [p.send("orders", f"u{i}".encode()) for i in range(16)]
        assert {r.group for r in spread} == {"g1", "g2"}
        assert {(r.group, r.queue_id) for r in spread} == {
            (g, q) for g in groups for q in range(QUEUES)}
        for i, r in enumerate(spread):  # each stored where its result says
            assert stored(groups[r.group], "orders", r.queue_id, r.queue_offset) == \
                f"u{i}".encode()
        keyed = {(r.group, r.queue_id) for r in
                 (p.send("orders", b"k", key="customer-9") for _ in range(10))}
        assert len(keyed) == 1
        batch = p.send_batch([Message("orders", b"b1"), Message("orders", b"b2"),
                              Message("orders", b"b3", key="customer-9")])
        assert {(r.group) for r in batch} == {next(iter(keyed))[0]}
        futs = [p.send_async("orders", f"a{i}".encode()) for i in range(40)]
        p.flush(60)
        assert {f.result().group for f in futs} == {"g1", "g2"}
        for i, f in enumerate(futs):
            r = f.result()
            assert stored(groups[r.group], "orders", r.queue_id, r.queue_offset) == \
                f"a{i}".encode()


def test_a_transaction_stays_in_one_group_and_one_spanning_groups_is_refused(start_server):
    a, b = start_server(FAST, name="a"), start_server(FAST, name="b")
    with TransactionProducer(a.address, "tx-group", lambda u: TxState.COMMIT,
                             feedback=False) as p:
        hand_over(p, route_of("orders", {"g1": a, "g2": b}))
        hand_over(p, route_of("only-g2", {"g2": b}))
        with p.transaction(group="g1") as tx:
            for i in range(6):
                tx.send("orders", f"t{i}".encode(), key=f"key-{i}")
        assert tx.result.state == TxState.COMMIT
        for i in range(6):  # keys hash over g1's own queues of the topic
            assert stored(a, "orders", key_slot(f"key-{i}", QUEUES), 0) is not None
        with pytest.raises(SpansGroups, match="only-g2 has no writable queue in broker group g1"):
            p.send_in_transaction([Message("orders", b"x"), Message("only-g2", b"y")],
                                  lambda tx_id, arg: TxState.COMMIT, group="g1")
        for server in (a, b):  # refused before PREPARE: nothing of it anywhere
            for q in range(QUEUES):
                assert stored(server, "only-g2", q, 0) is None
        with pytest.raises(SpansGroups):
            p.send_batch([Message("orders", b"x", queue_id=0),
                          Message("orders", b"y", queue_id=QUEUES)])  # global: g1, g2


def test_killing_one_groups_node_leaves_sends_to_the_other_group_going(start_server):
    a, b = start_server(FAST, name="a"), start_server(FAST, name="b")
    with Producer(a.address, delivery_timeout=3, request_timeout=2) as p:
        hand_over(p, route_of("orders", {"g1": a, "g2": b}))
        assert {p.send("orders", b"before").group for _ in range(8)} == {"g1", "g2"}
        b.kill()
        ok, failed = [], 0
        deadline = time.monotonic() + 60
        while len(ok) < 40 and time.monotonic() < deadline:
            try:
                ok.append(p.send("orders", b"after"))
            except DeliveryTimeout:
                failed += 1
        assert len(ok) == 40 and {r.group for r in ok} == {"g1"}
        # (a send caught on g2 waits out its deadline: ``failed``; the rest skip g2)


def test_the_asyncio_producer_routes_the_same_way(start_server):
    a, b = start_server(FAST, name="a"), start_server(FAST, name="b")
    groups = {"g1": a, "g2": b}

    async def produce():
        async with AsyncProducer(a.address, linger_ms=1) as p:
            hand_over(p, route_of("orders", groups))
            sent = [await p.send("orders", f"s{i}".encode()) for i in range(8)]
            keyed = {((r := await p.send("orders", b"k", key="customer-9")).group, r.queue_id)
                     for _ in range(5)}
            batch = await p.send_batch([Message("orders", b"b1"), Message("orders", b"b2")])
            futs = [await p.send_async("orders", f"a{i}".encode()) for i in range(40)]
            await p.flush(60)
            return sent, keyed, batch, [f.result() for f in futs]

    sent, keyed, batch, spread = asyncio.run(asyncio.wait_for(produce(), 120))
    assert {r.group for r in sent} == {"g1", "g2"} == {r.group for r in spread}
    assert len(keyed) == 1 and len({r.group for r in batch}) == 1
    for i, r in enumerate(spread):
        assert stored(groups[r.group], "orders", r.queue_id, r.queue_offset) == \
            f"a{i}".encode()
