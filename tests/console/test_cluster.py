"""``/cluster`` in a real browser: a single node with its send rate charted while a
producer runs, a replicated group elected through etcd (the primary lists its follower in
sync, the follower names its primary), and a cluster of two broker groups (each group's
primary)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from fmq.client import Producer
from fmq.message import Message
from tests.cluster.kit import CLUSTER, CONFIG, wait_primary
from tests.etcdkit import ETCD, EtcdProcess
from tests.replication.failover_kit import GROUP_CONFIG
from tests.server.harness import ServerProcess, free_port, run_cli, wait_until

from .browser import chromium, watched

pytestmark = pytest.mark.timeout(300)
needs_etcd = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

SAMPLE_MS = 300


def with_sampling(config: dict) -> dict:
    return {**config, "server": {**config.get("server", {}), "console_sample_ms": SAMPLE_MS}}


def console_node(path: str, config: dict, *args: str) -> tuple[ServerProcess, str]:
    port = free_port()
    node = ServerProcess(path, with_sampling(config),
                         extra_args=(*args, "--console-port", str(port)))
    return node, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium(str(tmp_path_factory.mktemp("cluster-shots"))) as b:
        yield b


def reload_until(page, url: str, ready, timeout: float = 30.0) -> None:
    """Reload ``url`` until ``ready()`` (the figures are sampled), at most ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        page.open(url)
        if ready() or time.monotonic() > deadline:
            return
        page.page.wait_for_timeout(300)


def test_a_single_node_charts_its_send_rate_while_a_producer_runs(tmp_path, browser):
    srv, url = console_node(str(tmp_path / "data"), {})
    srv.start()
    stop = threading.Event()

    def produce() -> None:
        with Producer(srv.address) as p:
            deadline = time.monotonic() + 120
            while not stop.is_set() and time.monotonic() < deadline:
                p.send_message(Message("charted", b"x" * 100, queue_id=0))

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        page = watched(browser, str(tmp_path / "shots"))
        sent = page.page.locator("#messages-chart + div .last").first
        reload_until(page, url + "/cluster",
                     lambda: sent.inner_text().endswith("/s") and float(
                         sent.inner_text().rstrip("/s").rstrip("k")) > 0)
        page.shot("cluster")
        assert page.text("#role") == "primary"  # of itself: nobody follows it
        assert "No follower" in page.text("#followers")
        assert float(sent.inner_text().rstrip("/s").rstrip("k")) > 0, sent.inner_text()
        assert page.page.locator("#messages-chart polyline").count() == 2
        assert page.text("#disk-free").split()[-1] in ("KiB", "MiB", "GiB")
        page.open(url + "/topics/charted")
        assert page.page.locator("#messages-chart polyline").count() >= 1
        page.shot("topic-chart")
    finally:
        stop.set()
        producer.join(30)
        srv.kill()


@needs_etcd
def test_a_replicated_groups_primary_and_follower(tmp_path, browser):
    etcd = EtcdProcess(str(tmp_path / "etcd")).start()
    nodes = []
    try:
        for name in ("n1", "n2"):
            nodes.append(console_node(str(tmp_path / name), GROUP_CONFIG, "--coordinator",
                                      etcd.url, "--group", "g", "--node", name))
        for node, _url in nodes:
            node.start()
        wait_until(lambda: sum(_role(n) == "primary" for n, _u in nodes) == 1, 60,
                   "one primary")
        (primary, primary_url), = [(n, u) for n, u in nodes if _role(n) == "primary"]
        (follower, follower_url), = [(n, u) for n, u in nodes if n is not primary]
        page = watched(browser, str(tmp_path / "shots"))
        in_sync = page.page.locator("#followers td.in-sync")
        reload_until(page, primary_url + "/cluster",
                     lambda: in_sync.count() == 1 and in_sync.inner_text() == "yes", 60)
        page.shot("cluster-primary")
        assert page.text("#role") == "primary"
        assert in_sync.inner_text() == "yes"
        reload_until(page, follower_url + "/cluster",
                     lambda: page.text("#primary-address") == primary.address, 60)
        assert page.text("#role") == "follower"
        assert page.text("#primary-address") == primary.address
        assert int(page.text("#epoch")) >= 1
    finally:
        for node, _url in nodes:
            node.kill()
        etcd.stop()


@needs_etcd
def test_a_cluster_of_two_broker_groups_lists_each_groups_primary(tmp_path, browser):
    etcd = EtcdProcess(str(tmp_path / "etcd")).start()
    nodes = {}
    try:
        for group in ("g1", "g2"):
            nodes[group] = console_node(str(tmp_path / group), CONFIG, "--coordinator",
                                        etcd.url, "--cluster-name", CLUSTER, "--group", group,
                                        "--node", f"{group}-n1")
            nodes[group][0].start()
        for node, _url in nodes.values():
            wait_primary(node)
        made = run_cli("topic", "create", "routed", "--queues-per-group", "2", "--server",
                       nodes["g2"][0].address)
        assert made.returncode == 0, made.stderr
        page = watched(browser, str(tmp_path / "shots"))
        rows = page.page.locator("#broker-groups tbody tr")
        reload_until(page, nodes["g1"][1] + "/cluster", lambda: rows.count() == 2 and all(
            nodes[g][0].address in page.text(f'tr[data-group="{g}"]')
            and "routed" in page.text(f'tr[data-group="{g}"]') for g in nodes), 60)
        page.shot("cluster-groups")
        for group, (node, _url) in nodes.items():
            row = page.text(f'tr[data-group="{group}"]')
            assert node.address in row, row
            assert "routed" in row, row  # the topic's route covers both groups
        assert "(this node's)" in page.text('tr[data-group="g1"]')
        page.open(nodes["g2"][1] + "/topics/routed")
        assert page.text("#route").startswith("broker group g2 holds its queues 2–3"), \
            page.text("#route")
    finally:
        for node, _url in nodes.values():
            node.kill()
        etcd.stop()


def _role(node: ServerProcess) -> str:
    from tests.cluster.kit import role
    return role(node)
