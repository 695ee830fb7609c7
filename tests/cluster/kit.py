"""Broker groups of one node each in one cluster, as real ``fmq server`` processes sharing a
real etcd, and what the cluster tests ask of them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

from fmq.client import Client, Consumer
from fmq.coordination.routes import ClusterRoutes
from fmq.errors import FMQError, NotHosted
from fmq.message import Message
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire
from tests.etcdkit import EtcdProcess
from tests.replication.cluster import SMALL
from tests.server.harness import ServerProcess, wait_until

CLUSTER = "c1"
#: Queues of a topic a route auto-creates (the brokers' queues_per_topic).
QUEUES_PER_TOPIC = 3
#: The routes' periodic re-read in these tests: a change reaches a node within it even
#: when the watch misses it.
RESYNC_MS = 1000
CONFIG = {**SMALL, "queues_per_topic": QUEUES_PER_TOPIC,
          "server": {"lease_ttl_s": 3, "route_resync_ms": RESYNC_MS}}


def start_node(tmp_path, etcd: EtcdProcess, group: str, config: dict | None = None,
               port: int | None = None) -> ServerProcess:
    node = ServerProcess(str(tmp_path / group), config or CONFIG, port=port, extra_args=(
        "--coordinator", etcd.url, "--cluster-name", CLUSTER, "--group", group,
        "--node", f"{group}-n1"))
    return node.start()


def role(node: ServerProcess) -> str:
    try:
        with Client(node.address, retries=0, connect_timeout=2, request_timeout=5) as c:
            return json.loads(c.call(Op.REPL_STATUS, {})["json"])["role"]
    except (FMQError, OSError):
        return "down"


def wait_primary(node: ServerProcess, timeout: float = 30.0) -> None:
    wait_until(lambda: role(node) == "primary", timeout, f"{node.address} to lead its group")


def call(node: ServerProcess, op: Op, fields: dict) -> dict:
    """One request, not retried (a NotHosted must reach the test)."""
    with Client(node.address, retries=0, request_timeout=20) as c:
        return c.call(op, fields)


def route(node: ServerProcess, topic: str) -> dict:
    return json.loads(call(node, Op.ROUTE, {"topic": topic})["json"])


def route_version(node: ServerProcess, topic: str) -> int:
    try:
        return route(node, topic)["version"]
    except FMQError:
        return -1


def send(node: ServerProcess, topic: str, body: bytes = b"m", queue_id: int | None = None
         ) -> dict:
    return call(node, Op.SEND, {"message": message_to_wire(Message(topic, body,
                                                                   queue_id=queue_id))})


def takes_writes(node: ServerProcess, topic: str, queue_id: int) -> bool:
    """Whether ``node`` stores a message in ``queue_id`` of ``topic`` now (False: it refused
    it as not hosted, which a client retries: its copy of the route or its making of the
    entry's queues is still behind)."""
    try:
        return send(node, topic, queue_id=queue_id)["result"]["queue_id"] == queue_id
    except NotHosted:
        time.sleep(0.1)
        return False


def queue_range(node: ServerProcess, topic: str, queue_id: int) -> tuple[int, int]:
    r = call(node, Op.QUEUE_RANGE, {"topic": topic, "queue_id": queue_id})
    return r["min_offset"], r["next_offset"]


def local_queues(node: ServerProcess, topic: str) -> int:
    """The queues of the node's own topic (0: it has none)."""
    try:
        answer = call(node, Op.TOPIC_DESCRIBE, {"topic": topic})
    except FMQError:
        return 0
    return json.loads(answer["json"])["topic"]["queues"]


#: How long a route change may take to reach a node: the watch's delay normally, the
#: periodic re-read (RESYNC_MS) at worst; generous for a loaded machine.
REFRESH_BOUND_S = 15.0


def known_everywhere(nodes: dict[str, ServerProcess], topic: str, version: int) -> None:
    """Wait until every node's copy holds ``topic``'s route at ``version`` or later."""
    for node in nodes.values():
        wait_until(lambda n=node: route_version(n, topic) >= version, REFRESH_BOUND_S,
                   f"{node.address} to know route version {version} of {topic}")


@contextmanager
def two_groups(tmp, config: dict | None = None
               ) -> Iterator[tuple[ClusterRoutes, dict[str, ServerProcess], EtcdProcess]]:
    """A real etcd and broker groups g1 and g2 of cluster CLUSTER, one node each (with
    ``config``, CONFIG by default), both registered with their primaries; everything
    stopped on the way out."""
    etcd = EtcdProcess(str(tmp / "etcd")).start()
    nodes: dict[str, ServerProcess] = {}
    try:
        for group in ("g1", "g2"):
            nodes[group] = start_node(tmp, etcd, group, config)
        for node in nodes.values():
            wait_primary(node)
        store = ClusterRoutes(etcd.url, CLUSTER)
        wait_until(lambda: {g: x.primary for g, x in store.groups().items()}
                   == {g: n.address for g, n in nodes.items()}, 30,
                   "both groups registered with their primaries")
        yield store, nodes, etcd
    finally:
        for node in nodes.values():
            node.kill()
        etcd.stop()


def read_and_commit(address: str, expected: int, start: str) -> None:
    """Consumer group billing reads ``expected`` messages of topic orders (from ``start``:
    "earliest", "committed") and commits."""
    got: list = []
    with Consumer(address, "billing", ["orders"], start=start) as c:
        wait_until(lambda: got.extend(c.poll(timeout=0.5)) or len(got) >= expected, 60,
                   f"billing to read {expected} messages")
        assert len(got) == expected
        c.commit()
