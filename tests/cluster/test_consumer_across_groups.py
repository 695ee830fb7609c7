"""Consumer groups spanning broker groups against a real cluster: a real etcd, two broker
groups of one node each as real ``fmq server`` processes, routing producers and consumers
(docs/cluster.md, "Consumer groups across broker groups"). Each global queue must have
exactly one owner in every settled generation, through joins, a leave, a consumer killed
with SIGKILL and a group's primary killed with SIGKILL and restarted on its data; offsets
are committed in the group that hosts each queue."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from fmq.client import Client, Consumer, Producer
from fmq.coordination.routes import ClusterRoutes
from fmq.errors import FMQError
from fmq.protocol import Op
from tests.etcdkit import ETCD, EtcdProcess
from tests.server.harness import ServerProcess, wait_until

from .kit import (
    CONFIG,
    call,
    queue_range,
    route_version,
    send,
    start_node,
    two_groups,
    wait_primary,
)

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

#: Short sessions, so that a killed consumer's queues move within seconds.
GROUP_CONFIG = {**CONFIG, "server": {**CONFIG["server"], "group_session_timeout_ms": 2000,
                                     "group_heartbeat_interval_ms": 200}}
QUEUES = 3  # per broker group: global indices 0..2 in g1, 3..5 in g2
SETTLE_S = 20.0
CONSUMER_OPTIONS = {"request_timeout": 3.0, "delivery_timeout": 8.0, "route_refresh_s": 1.0}


def start_group(tmp, etcd: EtcdProcess, group: str, port: int | None = None) -> ServerProcess:
    return start_node(tmp, etcd, group, GROUP_CONFIG, port)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("consumer-cluster")
    with two_groups(tmp, GROUP_CONFIG) as (store, nodes, etcd):
        yield store, nodes, etcd, tmp


def routed_topic(store: ClusterRoutes, nodes: dict, topic: str, groups=("g1", "g2")) -> None:
    route = store.create(topic, QUEUES, list(groups))
    for node in nodes.values():
        wait_until(lambda n=node: route_version(n, topic) >= route.version, 15,
                   f"{node.address} to know the route of {topic}")


# ---------------------------------------------------------------- what the groups say


def groups_answer(node: ServerProcess, group: str) -> dict:
    """GROUPS of one consumer group on one broker group: generation, members, offsets."""
    answer = json.loads(call(node, Op.GROUPS, {"group": group})["json"])["groups"]
    return answer[0] if answer else {"generation": 0, "members": {}, "offsets": []}


def owners(nodes: dict, group: str, topic: str) -> dict[int, list[str]]:
    """Each global queue index of ``topic`` with the members that own it, as the broker
    groups hosting them answer GROUPS."""
    return owners_in({g: groups_answer(node, group) for g, node in nodes.items()}, topic)


def owners_in(answers: dict[str, dict], topic: str) -> dict[int, list[str]]:
    """Each global queue index of ``topic`` with its owners in one GROUPS answer per broker
    group (a queue granted between two answers of one group would be counted at two
    generations at once)."""
    bases = {"g1": 0, "g2": QUEUES}
    out: dict[int, list[str]] = {i: [] for i in range(2 * QUEUES)}
    for g, answer in answers.items():
        for mid, queues in answer["members"].items():
            for q in queues:
                t, _, qid = q.rpartition("/")
                if t == topic:
                    out[bases[g] + int(qid)].append(mid)
    return out


def members_everywhere(nodes: dict, group: str) -> list[set[str]]:
    return [set(groups_answer(n, group)["members"]) for n in nodes.values()]


def settled(nodes: dict, group: str, topic: str, members: set[str],
            consumers: list[Consumer]) -> bool:
    """Every broker group has exactly ``members``, every queue was handed over to its
    owner (a moved queue has none until its holder released it, docs/cluster.md), and
    each in-process consumer has taken the generation its broker groups answer."""
    try:
        answers = {g: groups_answer(n, group) for g, n in nodes.items()}
        owned = owners_in(answers, topic)
        if not all(owned.values()):
            return False
    except FMQError:
        return False
    if any(set(a["members"]) != members for a in answers.values()):
        return False
    for c in consumers:
        gens = c.broker_groups.generations()
        if any(gens.get(g) != a["generation"] for g, a in answers.items()):
            return False
        # Reading the assignment applies the one it was given; the consumer agreeing with
        # the generation's owners is part of settling.
        mine = [i for t, i in c.assignment if t == topic]
        if mine != sorted(i for i, ms in owned.items() if c.member_id in ms):
            return False
    return True


def check_one_owner(nodes: dict, group: str, topic: str, members: set[str],
                    consumers: list[Consumer]) -> None:
    """Once settled: each global queue has exactly one owner, a live member, and each
    in-process consumer reads exactly the queues its broker groups gave it."""
    wait_until(lambda: settled(nodes, group, topic, members, consumers), SETTLE_S,
               f"members {sorted(members)} to settle in both broker groups")
    owned = owners(nodes, group, topic)
    assert all(len(ms) == 1 for ms in owned.values()), owned
    assert {ms[0] for ms in owned.values()} <= members
    seen: list[int] = []
    for c in consumers:
        mine = [i for t, i in c.assignment if t == topic]
        assert mine == sorted(i for i, ms in owned.items() if ms[0] == c.member_id)
        seen.extend(mine)
    assert len(seen) == len(set(seen))  # no queue read by two consumers


# ---------------------------------------------------------------- consuming


class Reader:
    """A consumer in a thread: polls, records what it got, commits after each batch."""

    def __init__(self, servers: str, group: str, topic: str) -> None:
        self.consumer = Consumer(servers, group, topic, **CONSUMER_OPTIONS)
        self.got: list[tuple[str, int, int, bytes]] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def member_id(self) -> str:
        return self.consumer.member_id

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self.consumer.poll(0.2)
                self.got.extend((m.group, m.queue_id, m.queue_offset, m.body) for m in batch)
                if batch:
                    self.consumer.commit()
            except FMQError as exc:  # pragma: no cover - the assertions say it
                self.errors.append(exc)
                time.sleep(0.2)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


READER_SCRIPT = """
import sys
from fmq.client import Consumer
servers, group, topic, out = sys.argv[1:5]
c = Consumer(servers, group, topic, request_timeout=3.0, delivery_timeout=8.0,
             route_refresh_s=1.0)
with open(out, "a") as f:
    f.write("member " + c.member_id + "\\n")
    f.flush()
    while True:
        batch = c.poll(0.2)
        for m in batch:
            f.write(m.body.decode() + "\\n")
        f.flush()
        if batch:
            c.commit()
"""


def read_lines(path: str) -> list[str]:
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


class Sender:
    """A routing producer in a thread, sending numbered messages; ``acked``: the bodies
    the cluster acknowledged."""

    def __init__(self, servers: str, topic: str) -> None:
        self.producer = Producer(servers, delivery_timeout=10, request_timeout=3,
                                 route_refresh_s=1.0)
        self.topic = topic
        self.acked: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            body = f"c{i}".encode()
            i += 1
            try:
                self.producer.send(self.topic, body)
                self.acked.append(body)
            except FMQError:
                pass  # not acknowledged: not owed to the consumers
            time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.close()


def committed_in_hosting_groups(nodes: dict, group: str, topic: str) -> bool:
    """Every queue's committed offset, in the broker group hosting it, is its end."""
    for node in nodes.values():
        rows = {(r["topic"], r["queue_id"]): r["committed"]
                for r in groups_answer(node, group)["offsets"]}
        for q in range(QUEUES):
            end = queue_range(node, topic, q)[1]
            if end and rows.get((topic, q)) != end:
                return False
    return True


# ---------------------------------------------------------------- the tests


def test_a_group_of_consumers_reads_every_group_exactly_once_when_steady(cluster):
    store, nodes, _etcd, _tmp = cluster
    routed_topic(store, nodes, "cc-steady")
    servers = ",".join(n.address for n in nodes.values())
    readers = [Reader(servers, "steady", "cc-steady") for _ in range(3)]
    try:
        members = {r.member_id for r in readers}
        check_one_owner(nodes, "steady", "cc-steady", members, [r.consumer for r in readers])
        assert members_everywhere(nodes, "steady") == [members, members]  # one id each
        with Producer(servers, linger_ms=1) as p:
            sent = [p.send("cc-steady", f"s{i}".encode()) for i in range(120)]
        assert {r.group for r in sent} == {"g1", "g2"}
        wait_until(lambda: sum(len(r.got) for r in readers) >= 120, 30, "all 120 consumed")
        time.sleep(0.5)  # a duplicate would arrive now
        got = [m for r in readers for m in r.got]
        assert len(got) == 120 and len({m[3] for m in got}) == 120  # exactly once
        assert {(m[0], m[1]) for m in got} == {(r.group, r.queue_id) for r in sent}
        wait_until(lambda: committed_in_hosting_groups(nodes, "steady", "cc-steady"), 15,
                   "every queue committed up to its end in its own broker group")
        assert not [e for r in readers for e in r.errors]
    finally:
        for r in readers:
            r.close()


def test_one_owner_per_queue_through_joins_leaves_and_kills(cluster):
    store, nodes, etcd, tmp = cluster
    topic, group = "cc-churn", "churn"
    routed_topic(store, nodes, topic)
    servers = ",".join(n.address for n in nodes.values())
    sender = Sender(servers, topic)
    a, b = Reader(servers, group, topic), Reader(servers, group, topic)
    readers = [a, b]
    out = str(tmp / "killed-reader.txt")
    child = None
    try:
        check_one_owner(nodes, group, topic, {a.member_id, b.member_id}, [a.consumer, b.consumer])
        # a join: a consumer in its own process
        child = subprocess.Popen([sys.executable, "-c", READER_SCRIPT, servers, group, topic,
                                  out])
        wait_until(lambda: any(x.startswith("member ") for x in read_lines(out)), 30,
                   "the child consumer to join")
        c_id = read_lines(out)[0].split()[1]
        check_one_owner(nodes, group, topic, {a.member_id, b.member_id, c_id},
                        [a.consumer, b.consumer])
        # a leave
        b.close()
        check_one_owner(nodes, group, topic, {a.member_id, c_id}, [a.consumer])
        d = Reader(servers, group, topic)
        readers.append(d)
        check_one_owner(nodes, group, topic, {a.member_id, c_id, d.member_id},
                        [a.consumer, d.consumer])
        # a consumer killed: its session ends in both broker groups
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        check_one_owner(nodes, group, topic, {a.member_id, d.member_id}, [a.consumer, d.consumer])
        # g1's primary killed and restarted on its data
        g1 = nodes["g1"]
        g1.kill()
        time.sleep(0.5)
        nodes["g1"] = start_group(tmp, etcd, "g1", port=g1.port)
        wait_primary(nodes["g1"])
        check_one_owner(nodes, group, topic, {a.member_id, d.member_id}, [a.consumer, d.consumer])
        before = len(sender.acked)
        wait_until(lambda: len(sender.acked) > before + 20, 30, "sends to go on")
        sender.stop()
        acked = set(sender.acked)

        def consumed() -> set[bytes]:
            return ({m[3] for r in readers for m in r.got}
                    | {x.encode() for x in read_lines(out) if not x.startswith("member ")})

        wait_until(lambda: acked <= consumed(), 30, "every acknowledged message consumed")
        assert {m[0] for r in readers for m in r.got} == {"g1", "g2"}
        wait_until(lambda: committed_in_hosting_groups(nodes, group, topic), 15,
                   "every queue committed up to its end in its own broker group")
    finally:
        sender.stop()
        if child is not None and child.poll() is None:
            child.kill()
        for r in readers:
            r.close()


def test_a_consumer_follows_its_topic_onto_a_new_group(cluster):
    store, nodes, _etcd, _tmp = cluster
    topic = "cc-grow"
    routed_topic(store, nodes, topic, groups=("g1",))
    reader = Reader(nodes["g1"].address, "grow", topic)
    try:
        wait_until(lambda: members_everywhere(nodes, "grow")[0] == {reader.member_id}, 15,
                   "the consumer to join g1")
        assert members_everywhere(nodes, "grow")[1] == set()  # g2 hosts nothing of it yet
        grown = store.expand(topic, "g2", QUEUES)
        wait_until(lambda: route_version(nodes["g2"], topic) >= grown.version, 15,
                   "g2 to know the route")
        wait_until(lambda: members_everywhere(nodes, "grow")[1] == {reader.member_id}, 15,
                   "the consumer to join g2 once its route refresh sees the new group")
        for q in range(QUEUES):
            send(nodes["g2"], topic, f"g2-{q}".encode(), queue_id=q)
        wait_until(lambda: {m[3] for m in reader.got} >= {f"g2-{q}".encode()
                                                          for q in range(QUEUES)}, 15,
                   "g2's messages consumed")
        assert {(m[0], m[1]) for m in reader.got} == {("g2", q) for q in range(QUEUES)}
        assert sorted(reader.consumer.assignment) == [(topic, i) for i in range(2 * QUEUES)]
    finally:
        reader.close()


def test_a_route_appearing_for_a_topic_rebalances_by_its_base(cluster):
    """A topic a group had before it had a route is assigned by queue id alone (base 0);
    once its route gives the group's queues global indices from 3, the group's primary
    rebalances by them, with a new generation, without any member joining."""
    store, nodes, _etcd, _tmp = cluster
    topic, group = "cc-late-route", "late"
    g2 = nodes["g2"]
    send(g2, topic, b"before any route")  # a local topic of 3 queues, no route
    with Client(g2.address, retries=0, request_timeout=10) as c:
        def beat() -> None:
            for mid in ("a", "b"):
                c.call(Op.GROUP_HEARTBEAT, {"group": group, "member_id": mid,
                                            "topics": [topic]})

        for mid in ("a", "b"):
            c.call(Op.GROUP_JOIN, {"group": group, "member_id": mid, "topics": [topic]})
        beat()  # a releases to b the queue the rule moved (docs/cluster.md)
        first = groups_answer(g2, group)
        assert first["members"] == {"a": [f"{topic}/0", f"{topic}/2"], "b": [f"{topic}/1"]}
        route = store.create(topic, QUEUES, ["g1", "g2"])  # g2's queues: global 3..5
        assert route.entry("g2").base == QUEUES
        # global 3, 4, 5 mod 2 members: b, a, b; each moved queue once its holder beat
        wait_until(lambda: groups_answer(g2, group)["members"]
                   == {"a": [f"{topic}/1"], "b": [f"{topic}/0", f"{topic}/2"]}, 15,
                   "g2's primary to rebalance once the route names its queues", tick=beat)
        assert groups_answer(g2, group)["generation"] > first["generation"]
