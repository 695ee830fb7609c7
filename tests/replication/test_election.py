"""Fail-over through etcd with real ``fmq server`` processes and a real etcd: a group elects
one primary, a killed primary is replaced and rejoins as a follower byte-identical, and a
primary that loses etcd stops acknowledging before its lease's TTL ends."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from fmq import Broker
from fmq.client import Client
from fmq.config import BrokerConfig
from fmq.coordination.broker_group import BrokerGroupRegistry
from fmq.coordination.lease import LeaderLease
from fmq.errors import FMQError
from fmq.message import Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire
from tests.etcdkit import ETCD, EtcdProcess
from tests.faults.invariants import check_index_matches_rebuild
from tests.server.harness import ServerProcess, run_cli

from .cluster import SMALL, assert_identical_up_to, pull_all, status, wait_caught_up

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

TTL_S = 3
QUEUES = 4
CONFIG = {**SMALL, "ack_mode": "sync", "min_insync": 1, "server": {"lease_ttl_s": TTL_S}}


@pytest.fixture
def etcd(tmp_path):
    server = EtcdProcess(str(tmp_path / "etcd")).start()
    yield server
    server.stop()


@pytest.fixture
def group(tmp_path, etcd):
    """group(names) -> started nodes of the group "g" electing through ``etcd``."""
    started: list[ServerProcess] = []

    def start(*names: str, config: dict = CONFIG) -> list[ServerProcess]:
        nodes = [ServerProcess(str(tmp_path / n), config,
                               extra_args=("--coordinator", etcd.url, "--group", "g",
                                           "--node", n)) for n in names]
        started.extend(nodes)
        return [n.start() for n in nodes]

    yield start
    for node in started:
        node.kill()


def role(node: ServerProcess) -> dict:
    try:
        return status(node)
    except (FMQError, OSError):
        return {"role": "down"}


def wait_primary(nodes: list[ServerProcess], timeout: float = 40.0) -> ServerProcess:
    """The one node serving as primary once every other node follows it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        roles = [role(n) for n in nodes]
        primaries = [n for n, r in zip(nodes, roles, strict=True) if r["role"] == "primary"]
        if len(primaries) == 1 and all(
                r.get("primary") == primaries[0].address for n, r in zip(nodes, roles,
                                                                            strict=True)
                if n is not primaries[0]):
            return primaries[0]
        time.sleep(0.1)
    raise AssertionError(f"no single primary: {[role(n) for n in nodes]}")


def send_acked(address: str, tag: str, count: int, timeout: float = 60.0) -> list[bytes]:
    """Send ``count`` messages one by one, retrying refusals (an election, too few replicas)
    within ``timeout``; returns the bodies acknowledged."""
    acked: list[bytes] = []
    deadline = time.monotonic() + timeout
    with Client(address, retries=0, request_timeout=10) as c:
        i = 0
        while i < count and time.monotonic() < deadline:
            body = f"{tag}-{i}".encode()
            try:
                c.call(Op.SEND, {"message": message_to_wire(Message("t", body, key=str(i)))})
            except FMQError as exc:
                assert exc.retriable, exc
                time.sleep(0.1)
                continue  # an unacknowledged attempt may be stored: counted only if acked
            acked.append(body)
            i += 1
    assert len(acked) == count, f"only {len(acked)} of {count} acknowledged"
    return acked


def bodies(node: ServerProcess) -> list[bytes]:
    return [bytes(b) for q in pull_all(node, "t", QUEUES) for _q, _o, b in q]


def test_group_elects_fails_over_and_the_old_primary_rejoins(group, tmp_path):
    nodes = group("n1", "n2", "n3")
    first = wait_primary(nodes)
    assert role(first)["epoch"] >= 1
    acked = send_acked(first.address, "before", 100)
    with Client(first.address, retries=0) as c:  # left open by the primary that dies
        tx_id = c.call(Op.PREPARE, {"producer_group": "g", "tx_id": None, "messages": [
            message_to_wire(Message("t", b"tx-across-failover"))]})["tx_id"]
    first.kill()  # SIGKILL

    rest = [n for n in nodes if n is not first]
    second = wait_primary(rest)
    assert role(second)["epoch"] > 1  # a new term
    acked += send_acked(second.address, "after", 50)
    deadline = time.monotonic() + 30
    with Client(second.address, retries=0) as c:  # the new primary has it open
        while True:
            try:
                assert c.call(Op.COMMIT, {"producer_group": "g", "tx_id": tx_id})["state"] == "commit"
                break
            except FMQError as exc:  # too few replicas yet: the other follower rejoins
                assert exc.retriable and time.monotonic() < deadline, exc
                time.sleep(0.1)
    acked.append(b"tx-across-failover")

    first.start()  # comes back as a follower of the new primary, its tail cut if any
    third = wait_primary(nodes)
    assert third is second
    for node in nodes:
        if node is not second:
            end = wait_caught_up(node, second)
            assert_identical_up_to(second, node, end)
    stored = bodies(second)
    for body in acked:  # no acknowledged write lost (sync, min_insync 1)
        assert body in stored, body
    assert bodies(first) == stored
    assert stored.count(b"tx-across-failover") == 1
    # I6 on every node: its index equals one rebuilt from its log, and all are the same.
    for node in nodes:
        assert node.stop() == 0, node.log()
    config = BrokerConfig(**{k: v for k, v in CONFIG.items() if k != "server"})
    dumps = [check_index_matches_rebuild(
        Broker.open(n.data_dir, config.replace(follow="127.0.0.1:1")), n.data_dir,
        config, str(tmp_path)) for n in nodes]
    assert dumps[0] == dumps[1] == dumps[2]


def test_primary_that_loses_etcd_stops_acknowledging_within_its_ttl(group, etcd):
    (node,) = group("solo", config={**CONFIG, "ack_mode": "async"})  # no follower to wait for
    assert wait_primary([node]) is node
    acks: list[float] = []
    refusals: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        with Client(node.address, retries=0, request_timeout=10) as c:
            while not stop.is_set():
                try:
                    c.call(Op.SEND, {"message": message_to_wire(Message("t", b"x"))})
                    acks.append(time.monotonic())
                except FMQError as exc:
                    refusals.append(type(exc).__name__)
                    time.sleep(0.05)
                except OSError:
                    time.sleep(0.05)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        deadline = time.monotonic() + 20
        while len(acks) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(acks) >= 20
        lost_etcd = time.monotonic()
        etcd.stop()
        deadline = lost_etcd + 4 * TTL_S
        while time.monotonic() < deadline and not refusals:
            time.sleep(0.05)
        time.sleep(1.0)
    finally:
        stop.set()
        producer.join(30)
    assert refusals, "the primary kept acknowledging without etcd"
    late = [t - lost_etcd for t in acks if t > lost_etcd + TTL_S]
    assert not late, f"acknowledged {len(late)} writes after its lease TTL ran out"
    assert role(node)["role"] in ("follower", "down")


def test_no_election_while_too_few_nodes_report(group):
    """3 nodes, min_insync 1: with the primary and one follower gone, the last follower may
    lack an acknowledged write, so it must not take over until the other one is back."""
    nodes = group("n1", "n2", "n3")
    first = wait_primary(nodes)
    send_acked(first.address, "x", 20)
    followers = [n for n in nodes if n is not first]
    followers[0].kill()
    first.kill()
    deadline = time.monotonic() + 3 * TTL_S
    while time.monotonic() < deadline:
        assert role(followers[1])["role"] == "follower"
        time.sleep(0.2)
    assert "not taking the free leader lease" in followers[1].log()
    followers[0].start()  # enough reports again: the one holding the most takes over
    wait_primary(followers)


def test_replica_forget_removes_a_node_from_the_registry(etcd):
    registry = BrokerGroupRegistry(LeaderLease(etcd.url, "g", "gone", "127.0.0.1:1"), 3)
    registry.register()
    assert "gone" in registry.nodes()
    done = run_cli("replica", "forget", "gone", "--coordinator", etcd.url, "--group", "g")
    assert done.returncode == 0, done.stderr
    assert "gone" not in registry.nodes()
    again = run_cli("replica", "forget", "gone", "--coordinator", etcd.url, "--group", "g")
    assert again.returncode != 0 and "not registered" in again.stderr
    assert "Traceback" not in again.stderr


def test_a_paused_primary_does_not_acknowledge_after_losing_its_lease(group):
    """SIGSTOP the primary until the other node takes over, send it a write meanwhile
    (it waits in the socket), SIGCONT: the write is answered with an error, never as
    done (fencing at the answer, not only at arrival); the node then rejoins as a
    follower with that write cut from its log."""
    config = {**CONFIG, "ack_mode": "async"}  # a write needs no follower: only the fence
    old, new = group("n1", "n2", config=config)
    assert wait_primary([old, new]) is old
    message = {"message": message_to_wire(Message("t", b"written-while-paused"))}
    outcome: list[object] = []
    with Client(old.address, retries=0, request_timeout=30) as c:
        c.call(Op.SEND, {"message": message_to_wire(Message("t", b"before"))})
        old.proc.send_signal(signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 40
            while role(new)["role"] != "primary":
                assert time.monotonic() < deadline, role(new)
                time.sleep(0.2)

            def send() -> None:
                try:
                    outcome.append(c.call(Op.SEND, message))
                except FMQError as exc:
                    outcome.append(exc)

            sender = threading.Thread(target=send)
            sender.start()
            time.sleep(0.5)  # the request sits in the paused node's socket
        finally:
            old.proc.send_signal(signal.SIGCONT)
        sender.join(40)
    assert len(outcome) == 1 and isinstance(outcome[0], FMQError), outcome
    end = wait_caught_up(old, new)
    assert_identical_up_to(new, old, end)
    assert b"written-while-paused" not in bodies(new)
