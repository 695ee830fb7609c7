"""A node whose users live in etcd serves nobody without a log-in until it knows them
(docs/security.md, *Before a node knows its users*): a fresh node (no ``security.json``)
with a coordinator refuses every request but the handshake, retriably, until its first
read of the cluster's users. Real etcd, real server processes."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from fmq.client import Client
from fmq.coordination.cluster_security import ClusterSecurity
from fmq.errors import AuthenticationRequired, ConnectionLost, FMQError, UsersNotLoaded
from fmq.protocol import Op
from fmq.security import Rule, make_credential
from tests.etcdkit import ETCD, EtcdProcess
from tests.replication.cluster import SMALL
from tests.server.harness import FMQ, ServerProcess, wait_until

from .conftest import PASSWORD

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

ADMIN = {"user": "admin", "password": PASSWORD}
ENTERING = "has not read its users yet"
LEAVING = "read its users from"


def seed_admin(url: str) -> None:
    """The cluster's document in etcd: one administrator."""
    cred = make_credential(PASSWORD)
    rule = Rule.make("admin", "cluster", "", False, "all", True)
    ClusterSecurity(url).change(lambda d: d.with_user("admin", cred, create=True)
                                .with_rule(rule))


def unauthenticated(address: str, op: Op = Op.STATS) -> FMQError | None:
    """One request without a log-in on a new connection: None when it was served, else
    the error it got. Raises ConnectionLost while nothing listens."""
    with Client(address, retries=0, connect_timeout=0.5, request_timeout=3) as c:
        try:
            c.call(op, {})
        except ConnectionLost:
            raise
        except FMQError as exc:
            return exc
    return None


def served(address: str) -> bool:
    with Client(address, retries=2, request_timeout=5, **ADMIN) as c:
        return "json" in c.call(Op.STATS, {})


@pytest.fixture
def etcd(tmp_path):
    server = EtcdProcess(str(tmp_path / "etcd")).start()
    seed_admin(server.url)
    yield server
    server.stop()


def test_a_fresh_node_refuses_everyone_while_etcd_is_down_and_asks_for_a_log_in_after(
        tmp_path, etcd):
    etcd.stop()  # the cluster has users, and nobody can read them now
    node = ServerProcess(str(tmp_path / "n1"), {**SMALL, "server": {"lease_ttl_s": 3}},
                         extra_args=("--coordinator", etcd.url, "--group", "g",
                                     "--node", "n1"))
    try:
        node.start()  # it answers PING: the handshake is open
        answers, refusals = 0, []
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            for op in (Op.STATS, Op.REPL_STATUS):
                error = unauthenticated(node.address, op)
                if error is None:
                    answers += 1
                else:
                    refusals.append(error)
        assert answers == 0, f"{answers} requests were served without a log-in"
        assert refusals and all(isinstance(e, UsersNotLoaded) and e.retriable
                                for e in refusals), {type(e).__name__ for e in refusals}
        assert "retry" in str(refusals[0])
        assert not served_within(node.address, 0.5), "a log-in worked with no users known"

        etcd.start()
        wait_until(lambda: LEAVING in node.log(), 40, "the node to read its users")
        error = unauthenticated(node.address)
        assert isinstance(error, AuthenticationRequired)
        assert not isinstance(error, UsersNotLoaded)
        assert served(node.address)
        log = node.log()
        assert log.count(ENTERING) == 1 and log.count(LEAVING) == 1, log
    finally:
        node.kill()


def served_within(address: str, seconds: float) -> bool:
    """Whether a log-in and a STATS succeed in one try (no retries of a refusal)."""
    try:
        with Client(address, retries=0, request_timeout=seconds + 2, **ADMIN) as c:
            c.call(Op.STATS, {})
        return True
    except FMQError:
        return False


def early_probe(tmp_path, url: str, probe_s: float) -> tuple[int, int, ServerProcess]:
    """Start a fresh node with coordinator ``url`` and send unauthenticated STATS from the
    moment it starts until ``probe_s`` seconds after its port first answered; (served,
    refused) and the node (running)."""
    node = ServerProcess(str(tmp_path / "n1"), {**SMALL, "server": {"lease_ttl_s": 3}},
                         extra_args=("--coordinator", url, "--group", "g", "--node", "n1"))
    args = [*FMQ, "server", "--data-dir", node.data_dir, "--host", "127.0.0.1", "--port",
            str(node.port), "--config", node.config_path, *node.extra_args]
    with open(node.log_path, "a") as log:
        node.proc = subprocess.Popen(args, stdout=log, stderr=log)
    answers = refused = 0
    first = None
    start = time.monotonic()
    while time.monotonic() - start < 60 and (first is None
                                             or time.monotonic() - first < probe_s):
        assert node.proc.poll() is None, node.log()
        try:
            error = unauthenticated(node.address)
        except ConnectionLost:
            time.sleep(0.002)
            continue
        first = first or time.monotonic()
        if error is None:
            answers += 1
        else:
            refused += 1
    return answers, refused, node


def test_a_fresh_node_with_etcd_up_refuses_from_its_first_answer(tmp_path, etcd):
    answers, refused, node = early_probe(tmp_path, etcd.url, 2.0)
    try:
        assert answers == 0, f"{answers} requests were served without a log-in"
        assert refused > 0
        assert served(node.address)
    finally:
        node.kill()


def test_a_fresh_node_refuses_while_etcd_is_slow_to_answer(tmp_path, etcd):
    """etcd stopped with SIGSTOP accepts connections and answers nothing: the node's first
    read of the users hangs, which widens the start-up window deterministically."""
    etcd.pause()
    try:
        answers, refused, node = early_probe(tmp_path, etcd.url, 3.0)
    finally:
        etcd.resume()
    try:
        assert answers == 0, f"{answers} requests were served without a log-in"
        assert refused > 0
        wait_until(lambda: LEAVING in node.log(), 40, "the node to read its users")
        assert isinstance(unauthenticated(node.address), AuthenticationRequired)
        assert served(node.address)
    finally:
        node.kill()


def test_a_node_with_a_cached_copy_asks_for_a_log_in_at_once_while_etcd_is_down(
        tmp_path, etcd):
    data_dir = str(tmp_path / "n1")
    node = ServerProcess(data_dir, {**SMALL, "server": {"lease_ttl_s": 3}},
                         client_options=ADMIN,
                         extra_args=("--coordinator", etcd.url, "--group", "g",
                                     "--node", "n1"))
    try:
        node.start()  # etcd up: it copies the users into security.json
        wait_until(lambda: os.path.exists(os.path.join(data_dir, "security.json")), 20,
                   "the node to cache its users")
        node.kill()
        etcd.stop()
        node.start()  # the copy is enough: log-in works, no "users not loaded" state
        error = unauthenticated(node.address)
        assert isinstance(error, AuthenticationRequired)
        assert not isinstance(error, UsersNotLoaded)
        assert served(node.address)
        assert ENTERING not in node.log().split("---- start 2")[1]
    finally:
        node.kill()


def test_a_cluster_without_users_is_served_once_etcd_answers(tmp_path):
    """The documented cost of the rule: a node cannot tell an unreadable cluster from one
    without users, so even a cluster without users waits for etcd's first answer."""
    etcd = EtcdProcess(str(tmp_path / "etcd"))  # not started yet: nothing answers there
    node = ServerProcess(str(tmp_path / "n1"), {**SMALL, "server": {"lease_ttl_s": 3}},
                         extra_args=("--coordinator", etcd.url, "--group", "g",
                                     "--node", "n1"))
    try:
        node.start()
        assert isinstance(unauthenticated(node.address), UsersNotLoaded)
        etcd.start()
        wait_until(lambda: LEAVING in node.log(), 40, "the node to read etcd")
        assert unauthenticated(node.address) is None  # no users: nothing to log in to
        node.kill()
        etcd.stop()
        node.start()  # its copy says the cluster has no users: it serves without etcd
        assert unauthenticated(node.address) is None
        assert ENTERING not in node.log().split("---- start 2")[1]
    finally:
        node.kill()
        etcd.stop()

