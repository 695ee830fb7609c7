"""Clients of a broker group (real servers on 127.0.0.1): HELLO says who is primary, clients
given several addresses find the primary, retry on it after it was killed or replaced
(a follower's data directory restarted as the primary, docs/replication.md), keep
answering check-backs, and read from a follower when asked to."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest

from fmq.client import Client, Consumer, Producer, TransactionProducer
from fmq.client.aio import AsyncProducer
from fmq.client.connection import Connection, parse_servers
from fmq.message import Message
from fmq.protocol import Op, encode_request
from fmq.protocol.frame import _decode
from fmq.protocol.schema import SCHEMA
from fmq.protocol.structs import Struct
from fmq.tx.state import TxState
from tests.client.answer_drop import AnswerDropProxy
from tests.server.harness import ServerProcess, free_port, json_lines, run_cli, server_stats

from .cluster import SMALL, pull_all, wait_caught_up

CONFIG = {**SMALL, "tx_check_after_ms": 300}
#: A client that survives a server restart: it looks for the primary up to 20 s per try.
PATIENT = {"request_timeout": 20.0, "retries": 5, "backoff_max": 0.5}


def hello(address: str, version: int) -> dict:
    conn = Connection(parse_servers(address)[0])
    try:
        return conn.request(Op.HELLO, {"protocol_version": version, "client": "test"}, 5)
    finally:
        conn.close()


def bodies(server: ServerProcess, topic: str, queues: int = 4) -> Counter:
    return Counter(body for queue in pull_all(server, topic, queues) for _q, _o, body in queue)


def requests_by_op(server: ServerProcess) -> dict[str, int]:
    return server_stats(server.address)["requests_by_op"]


def as_primary(follower: ServerProcess) -> ServerProcess:
    """The manual fail-over of docs/replication.md: the follower stopped, its data
    directory started again without ``follow``, on the same port."""
    follower.stop()
    return ServerProcess(follower.data_dir, CONFIG, port=follower.port).start()


def test_hello_names_the_role_and_the_primary_on_both(node):
    primary = node("primary", CONFIG)
    follower = node("follower", {**CONFIG, "follow": primary.address})
    assert hello(primary.address, 2)["node"] == {"role": "primary", "primary": ""}
    assert hello(follower.address, 2)["node"] == {"role": "follower",
                                                  "primary": primary.address}
    # A version-1 client gets the answer it always got: exactly the four old fields.
    old = Struct("hello v1", SCHEMA[Op.HELLO].response[:4])
    conn = Connection(parse_servers(follower.address)[0])
    try:
        fut = conn.submit_encoded(
            Op.HELLO,
            lambda rid: encode_request(Op.HELLO, rid, {"protocol_version": 1, "client": "old"}),
            lambda frame: _decode(old, frame.payload))
        assert fut.result(5)["protocol_version"] == 1
    finally:
        conn.close()


def test_clients_given_followers_and_dead_ports_find_the_primary(node):
    primary = node("primary", CONFIG)
    follower = node("follower", {**CONFIG, "follow": primary.address})
    dead = f"127.0.0.1:{free_port()}"
    for servers in (f"{follower.address},{primary.address}",
                    f"{dead},{follower.address},{primary.address}",
                    f"{dead},{follower.address}"):  # the primary only named by the follower
        with Producer(servers, retries=0) as p:
            p.send("t", servers.encode(), queue_id=0)
            assert p._conn.address == parse_servers(primary.address)[0]
            p.send_async("t", servers.encode(), queue_id=0).result(10)
    assert sum(bodies(primary, "t").values()) == 6


def test_idempotent_producer_retries_across_a_killed_primary_without_duplicates(node):
    primary = node("primary", CONFIG)
    follower = node("follower", {**CONFIG, "follow": primary.address})
    servers = f"{follower.address},{primary.address}"
    sent, errors = [], []
    with Producer(servers, linger_ms=1, **PATIENT) as p:
        def produce() -> None:
            try:
                futures = []
                for i in range(3000):
                    futures.append(p.send_async("t", f"m{i}".encode()))
                    if i % 100 == 0:
                        p.send("t", f"s{i}".encode())  # the synchronous path too
                        sent.append(f"s{i}".encode())
                    time.sleep(0.0005)
                for f in futures:
                    f.result(60)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        worker = threading.Thread(target=produce)
        worker.start()
        time.sleep(0.5)
        primary.kill()  # sends are in flight: their answers are lost
        time.sleep(0.5)
        primary.start()
        worker.join(120)
    assert not errors, errors[:3]
    got = bodies(primary, "t")
    expected = {f"m{i}".encode() for i in range(3000)} | set(sent)
    assert set(got) == expected
    assert max(got.values()) == 1  # resends were answered from the dedup window


def test_producer_moves_to_the_follower_restarted_as_primary(node):
    primary = node("primary", CONFIG)
    follower = node("follower", {**CONFIG, "follow": primary.address})
    with Producer(f"{follower.address},{primary.address}", **PATIENT) as p:
        for i in range(20):
            p.send("t", f"before-{i}".encode())
        wait_caught_up(follower, primary)
        primary.kill()
        promoted = as_primary(follower)
        try:
            for i in range(20):
                p.send("t", f"after-{i}".encode())
            assert p._conn.address == parse_servers(promoted.address)[0]
            assert sum(bodies(promoted, "t").values()) == 40
        finally:
            promoted.kill()


@pytest.mark.parametrize("fail_over", [False, True], ids=["restarted", "promoted"])
def test_check_back_continues_after_the_primary_is_restarted_or_replaced(node, fail_over):
    primary = node("primary", CONFIG)
    follower = node("follower", {**CONFIG, "follow": primary.address})
    decide = threading.Event()
    asked: list[str] = []

    def checker(uncertain) -> TxState:
        asked.append(uncertain.tx_id)
        return TxState.COMMIT if decide.is_set() else TxState.UNKNOWN

    with TransactionProducer(f"{follower.address},{primary.address}", "pg", checker,
                             **PATIENT) as tp:
        result = tp.send_in_transaction(Message("t", b"tx-body", queue_id=0),
                                        lambda tx_id, arg: TxState.UNKNOWN)
        assert result.state == TxState.OPEN
        wait_caught_up(follower, primary)  # the PREPARE is on the follower
        primary.kill()  # the check-back's connection is cut
        promoted = as_primary(follower) if fail_over else primary.start()
        try:
            decide.set()
            deadline = time.monotonic() + 30
            while bodies(promoted, "t", 1)[b"tx-body"] == 0:
                assert time.monotonic() < deadline, f"no check-back answered: {asked}"
                time.sleep(0.1)
            assert tp._conn.address == parse_servers(promoted.address)[0]
            assert result.tx_id in asked
        finally:
            promoted.kill()


def test_consumer_reads_from_a_follower_and_commits_on_the_primary(node):
    primary = node("primary", CONFIG)
    follower = node("follower", {**CONFIG, "follow": primary.address})
    with Producer(primary.address) as p:
        p.send_batch([Message("t", f"m{i}".encode(), queue_id=i % 4) for i in range(40)])
    wait_caught_up(follower, primary)
    servers = f"{follower.address},{primary.address}"
    with Consumer(servers, "cg", "t", start="earliest", follower_reads=True,
                  retries=False) as c:
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 40 and time.monotonic() < deadline:
            got += c.poll(1.0)
        c.commit()
        assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(40))
        assert c._reads._conn.address == parse_servers(follower.address)[0]  # pulls
        assert c._conn.address == parse_servers(primary.address)[0]  # group and commits
    on_follower, on_primary = requests_by_op(follower), requests_by_op(primary)
    assert on_follower.get("PULL", 0) > 0 and on_primary.get("PULL", 0) == 0
    assert on_primary.get("COMMIT_OFFSET", 0) > 0 and "COMMIT_OFFSET" not in on_follower
    assert on_primary.get("GROUP_JOIN", 0) == 1 and "GROUP_JOIN" not in on_follower
    with Producer(primary.address) as p:
        committed = [p.call(Op.FETCH_OFFSET, {"group": "cg", "topic": "t",
                                              "queue_id": q})["offset"] for q in range(4)]
    assert committed == [10, 10, 10, 10]
    # Without follower_reads, the same servers read from the primary.
    with Consumer(servers, "cg2", "t", start="earliest", retries=False) as c:
        assert c._reads is c and len(c.poll(5.0)) > 0
        assert c._conn.address == parse_servers(primary.address)[0]


def test_cli_commands_find_the_primary_and_consume_from_a_follower(node):
    primary = node("primary", CONFIG)
    follower = node("follower", {**CONFIG, "follow": primary.address})
    servers = f"127.0.0.1:{free_port()},{follower.address},{primary.address}"
    out = run_cli("produce", "--server", servers, "--topic", "t", "--body", "hello")
    assert out.returncode == 0, out.stderr
    wait_caught_up(follower, primary)
    out = run_cli("consume", "--server", servers, "--topic", "t", "--group", "cli",
                  "--follower-reads", "--read-server", follower.address, "--max", "1",
                  "--idle-timeout", "10", "--json")
    assert out.returncode == 0, out.stderr
    assert [m["body"] for m in json_lines(out.stdout)] == ["hello"]
    with Producer(primary.address) as p:  # the commit reached the primary
        assert sorted(p.call(Op.FETCH_OFFSET, {"group": "cli", "topic": "t", "queue_id": q}
                             )["offset"] for q in range(4)) == [-1, -1, -1, 1]
    out = run_cli("stats", "--server", f"{follower.address},{primary.address}", "--json")
    assert out.returncode == 0, out.stderr
    bad = run_cli("consume", "--server", servers, "--topic", "t", "--read-server",
                  follower.address)
    assert bad.returncode == 2 and "--follower-reads" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_asyncio_producer_finds_the_primary_and_follows_a_not_primary(node):
    primary = node("primary", CONFIG)
    follower = node("follower", {**CONFIG, "follow": primary.address})

    async def run() -> tuple:
        servers = f"127.0.0.1:{free_port()},{follower.address},{primary.address}"
        async with AsyncProducer(servers) as p:
            await p.send("t", b"a", queue_id=0)
            first = p._conn.address
            await (await p.send_async("t", b"b", queue_id=0))
        # A client that believes the follower is the primary (an old answer) is sent on by
        # its NotPrimary.
        async with AsyncProducer(follower.address) as p:
            p.finder.node = "any"
            await p.send("t", b"c", queue_id=0)
            return first, p._conn.address

    first, moved = asyncio.run(run())
    assert first == moved == parse_servers(primary.address)[0]
    assert sorted(bodies(primary, "t", 1)) == [b"a", b"b", b"c"]


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_send_whose_answer_was_lost_is_resent_to_the_restarted_primary(node, idempotent):
    """The server stored the send, its answer never arrived, the primary was killed and
    restarted: the retry stores nothing twice when the producer is idempotent (the
    restarted primary answers from its dedup window, rebuilt from the log), and a second
    copy when it is not (what docs/client.md warns of)."""
    primary = node("primary", CONFIG)
    proxy = AnswerDropProxy(primary.address)
    outcome: list = []
    try:
        with Producer(proxy.address, idempotent=idempotent, request_timeout=20, retries=40,
                      backoff_max=0.5) as p:
            p.send("t", b"warm-up", queue_id=0)  # connected before the answer is dropped
            proxy.drop_next_send.set()
            worker = threading.Thread(
                target=lambda: outcome.append(p.send("t", b"once", queue_id=0)))
            worker.start()
            assert proxy.dropped.wait(10)
            primary.kill()
            primary.start()
            worker.join(60)
    finally:
        proxy.close()
    assert len(outcome) == 1
    stored = [o for _q, o, body in pull_all(primary, "t", 1)[0] if body == b"once"]
    if idempotent:
        assert stored == [outcome[0].offset]  # the original's result, one copy
    else:
        assert len(stored) == 2 and outcome[0].offset == stored[1]


def test_consumer_carries_on_with_the_promoted_follower(node):
    primary = node("primary", CONFIG)
    follower = node("follower", {**CONFIG, "follow": primary.address})
    servers = f"{follower.address},{primary.address}"
    with Producer(servers, **PATIENT) as p, \
            Consumer(servers, "cg", "t", start="earliest", retries=False,
                     request_timeout=20.0, backoff_max=0.5) as c:
        p.send_batch([Message("t", f"a{i}".encode(), queue_id=i % 4) for i in range(20)])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            got += c.poll(1.0)
        c.commit()
        wait_caught_up(follower, primary)  # the commits (OFFSET records) are copied
        primary.kill()
        promoted = as_primary(follower)
        try:
            p.send_batch([Message("t", f"b{i}".encode(), queue_id=i % 4) for i in range(20)])
            deadline = time.monotonic() + 30
            while len(got) < 40 and time.monotonic() < deadline:
                got += c.poll(1.0)
            c.commit()
            assert sorted(m.body for m in got) == sorted(
                [f"a{i}".encode() for i in range(20)] + [f"b{i}".encode() for i in range(20)])
            assert c._conn.address == parse_servers(promoted.address)[0]
            with Client(promoted.address) as admin:
                assert [admin.call(Op.FETCH_OFFSET, {"group": "cg", "topic": "t",
                                                     "queue_id": q})["offset"]
                        for q in range(4)] == [10, 10, 10, 10]
        finally:
            promoted.kill()
