"""A routing producer through a fail-over of one broker group: every sending thread (sync
sends and send_async batches),
including those whose request was in flight to the killed primary (kept in their group,
queue and sequence numbers, since it may have been stored), carries on on the group's new
primary, which the route names once the new primary has announced itself."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from fmq.client import Producer
from fmq.client.aio import AsyncProducer
from fmq.coordination.routes import ClusterRoutes
from tests.etcdkit import ETCD, EtcdProcess
from tests.server.harness import ServerProcess, wait_until

from .kit import CLUSTER, CONFIG, role, wait_primary

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

THREADS = 4  # two of sync sends, two of send_async; one more thread runs asyncio
#: From the kill to every thread's next send stored in g1: the lease (3 s), the election
#: (the follower waits for the dead primary's report to expire when it lagged), the
#: announce, and retries' back-off, on a loaded machine (the whole suite runs beside it).
BOUND_S = 90.0


def _node(tmp, etcd: EtcdProcess, group: str, n: int) -> ServerProcess:
    return ServerProcess(str(tmp / f"{group}-n{n}"), CONFIG, extra_args=(
        "--coordinator", etcd.url, "--cluster-name", CLUSTER, "--group", group,
        "--node", f"{group}-n{n}")).start()


def test_every_sender_reaches_the_groups_new_primary_after_a_kill(tmp_path):
    etcd = EtcdProcess(str(tmp_path / "etcd")).start()
    nodes: list[ServerProcess] = []
    stop = threading.Event()
    try:
        first = _node(tmp_path, etcd, "g1", 1)
        nodes.append(first)
        wait_primary(first)
        nodes += [_node(tmp_path, etcd, "g1", 2), _node(tmp_path, etcd, "g2", 1)]
        wait_primary(nodes[2])
        routes = ClusterRoutes(etcd.url, CLUSTER)
        wait_until(lambda: set(routes.groups()) == {"g1", "g2"}, 30, "both groups registered")
        routes.create("fo", 2)  # g1 holds global queues 0-1, g2 2-3
        done: list[list[float]] = [[] for _ in range(THREADS)]  # when each g1 send ended
        errors: list[BaseException] = []
        servers = ",".join(n.address for n in nodes)

        def send(i: int) -> None:
            with Producer(servers, delivery_timeout=BOUND_S + 30) as p:
                while not stop.is_set():
                    try:
                        if i % 2:  # the batches of send_async, retried by their sender
                            result = p.send_async("fo", b"x", queue_id=i % 2).result(
                                BOUND_S + 30)
                        else:
                            result = p.send("fo", b"x", queue_id=i % 2)
                    except BaseException as exc:  # noqa: BLE001 - reported below
                        errors.append(exc)
                        return
                    assert result.group == "g1"
                    done[i].append(time.monotonic())

        def send_aio() -> None:
            async def loop() -> None:
                async with AsyncProducer(servers, linger_ms=1,
                                         delivery_timeout=BOUND_S + 30) as p:
                    n = 0
                    while not stop.is_set():
                        n += 1
                        if n % 2:
                            result = await p.send("fo", b"a", queue_id=0)
                        else:
                            fut = await p.send_async("fo", b"a", queue_id=1)
                            result = await asyncio.wait_for(fut, BOUND_S + 30)
                        assert result.group == "g1"
                        done[THREADS].append(time.monotonic())
            try:
                asyncio.run(loop())
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        done.append([])  # the asyncio producer's
        threads = [threading.Thread(target=send, args=(i,), daemon=True)
                   for i in range(THREADS)] + [threading.Thread(target=send_aio, daemon=True)]
        for t in threads:
            t.start()
        wait_until(lambda: all(len(d) >= 20 for d in done), 60, "every thread sending to g1")
        wait_until(lambda: role(nodes[1]) == "follower", 30, "g1's second node to follow")
        killed_at = time.monotonic()
        first.kill()
        try:
            wait_until(lambda: errors or all(d[-1] > killed_at + 0.5 for d in done), BOUND_S,
                       "every thread to store a send in g1 again after its primary was killed")
        except AssertionError as exc:
            last = [round(d[-1] - killed_at, 2) for d in done]
            raise AssertionError(f"{exc}; each thread's last send stored, seconds after the "
                                 f"kill: {last}; g1's other node: {role(nodes[1])}") from None
        assert not errors, errors
        assert role(nodes[1]) == "primary"
    finally:
        stop.set()
        for node in nodes:
            node.kill()
        etcd.stop()

