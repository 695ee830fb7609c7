"""Users and access rules of a cluster live in etcd: every node copies them into its
``security.json``, so a fail-over never changes who may do what, and a node logs users in
with its copy while etcd does not answer. Real etcd, real server processes, real kill -9."""

from __future__ import annotations

import json
import os
import subprocess
import threading

import pytest

from fmq.client import Client, Producer
from fmq.client.auth import make_user_fields
from fmq.coordination.cluster_security import ClusterSecurity, SecurityFollower
from fmq.errors import AuthenticationFailed, FMQError, InvalidArgument
from fmq.protocol import Op
from fmq.security import Rule, UserStore, make_credential
from tests.etcdkit import ETCD, EtcdProcess
from tests.replication.cluster import SMALL
from tests.server.harness import FMQ, ServerProcess, wait_until

from .conftest import PASSWORD, add_rule_offline, add_user_offline

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (.ci/run installs etcd-server)")

ADMIN = {"user": "admin", "password": PASSWORD}


@pytest.fixture
def etcd(tmp_path):
    server = EtcdProcess(str(tmp_path / "etcd")).start()
    yield server
    server.stop()


def users_in(data_dir: str) -> set[str]:
    try:
        with open(os.path.join(data_dir, "security.json")) as f:
            return set(json.load(f)["users"])
    except FileNotFoundError:
        return set()


def role(node: ServerProcess) -> str:
    try:
        with Client(node.address, retries=1, connect_timeout=2, **ADMIN) as c:
            return json.loads(c.call(Op.REPL_STATUS, {})["json"])["role"]
    except (FMQError, OSError):
        return "down"


def test_a_user_added_on_the_primary_logs_in_on_the_next_primary_after_a_kill_9(
        tmp_path, etcd):
    n1_dir, n2_dir = str(tmp_path / "n1"), str(tmp_path / "n2")
    for user in ("admin", "replicator"):
        add_user_offline(n1_dir, user)
    add_rule_offline(n1_dir, "--principal", "admin", "--operation", "all", "--cluster")
    add_rule_offline(n1_dir, "--principal", "admin", "--operation", "all", "--topic", "",
                     "--prefix")
    add_rule_offline(n1_dir, "--principal", "replicator", "--operation", "admin", "--cluster")
    password_file = tmp_path / "replicator.password"
    password_file.write_text(PASSWORD + "\n")
    config = {**SMALL, "server": {"lease_ttl_s": 3, "follow_user": "replicator",
                                  "follow_password_file": str(password_file)}}
    nodes = []
    try:
        for name, data_dir in (("n1", n1_dir), ("n2", n2_dir)):
            node = ServerProcess(data_dir, config, client_options=ADMIN, extra_args=(
                "--coordinator", etcd.url, "--group", "g", "--node", name))
            nodes.append(node)
            node.start()
            if name == "n1":  # n1 leads and its users become the cluster's
                wait_until(lambda: role(nodes[0]) == "primary", 30, "n1 to lead")
        n1, n2 = nodes
        # n2 started without users: it takes the cluster's.
        wait_until(lambda: users_in(n2_dir) == {"admin", "replicator"}, 20,
                   "n2 to copy the cluster's users")
        with Client(n1.address, **ADMIN) as c:  # an administrator adds bob on the primary
            c.call(Op.USER_PUT, make_user_fields("bob", "bob's password", True))
            c.call(Op.ACL_ADD, {"principal": "bob", "resource_type": "topic", "pattern": "t",
                                "prefix": False, "operation": "produce", "allow": True})
        wait_until(lambda: "bob" in users_in(n2_dir), 20, "n2 to copy bob")
        wait_until(lambda: role(n2) == "follower", 30, "n2 to follow n1")
        n1.kill()
        wait_until(lambda: role(n2) == "primary", 60, "n2 to take over")
        with Producer(n2.address, user="bob", password="bob's password") as p:
            assert p.send("t", b"after the fail-over").queue_offset >= 0
    finally:
        for node in nodes:
            node.kill()


def test_a_node_logs_in_with_its_copy_while_etcd_is_down(tmp_path, etcd):
    data_dir = str(tmp_path / "n1")
    add_user_offline(data_dir, "admin")
    add_rule_offline(data_dir, "--principal", "admin", "--operation", "all", "--cluster")
    node = ServerProcess(data_dir, {**SMALL, "server": {"lease_ttl_s": 3}},
                         client_options=ADMIN,
                         extra_args=("--coordinator", etcd.url, "--group", "g"))
    try:
        node.start()
        cluster = ClusterSecurity(etcd.url)
        wait_until(lambda: cluster.read()[0] is not None, 20, "n1 to seed the cluster")
        cred = make_credential("carol's password")
        cluster.change(lambda d: d.with_user("carol", cred, create=True))
        wait_until(lambda: "carol" in users_in(data_dir), 20, "n1 to copy carol")
        node.kill()
        etcd.stop()
        node.start()  # no etcd: it serves, and carol logs in with the copy
        with Client(node.address, user="carol", password="carol's password") as c:
            assert c.ping()
        with pytest.raises(AuthenticationFailed):
            Client(node.address, user="carol", password="wrong", retries=1).ping()
    finally:
        node.kill()


def test_cli_changes_every_node_once_and_concurrent_changes_all_land(tmp_path, etcd):
    env = {**os.environ, "FMQ_NEW_PASSWORD": PASSWORD}

    def fmq(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*FMQ, *args], env=env, capture_output=True, text=True,
                              timeout=60, check=False)

    out = fmq("user", "add", "admin", "--coordinator", etcd.url, "--cluster-name", "c1")
    assert out.returncode == 0, out.stderr
    out = fmq("acl", "add", "--principal", "admin", "--operation", "all", "--cluster",
              "--coordinator", etcd.url, "--cluster-name", "c1")
    assert out.returncode == 0 and "added" in out.stdout, out.stderr
    listed = fmq("user", "list", "--coordinator", etcd.url, "--cluster-name", "c1", "--json")
    assert [json.loads(line)["user"] for line in listed.stdout.splitlines()] == ["admin"]
    # Another cluster's users are another document.
    assert fmq("user", "list", "--coordinator", etcd.url, "--cluster-name", "c2").stdout == ""
    refused = fmq("user", "remove", "admin", "--coordinator", etcd.url, "--cluster-name", "c1")
    assert refused.returncode != 0 and "last user" in refused.stderr
    both = fmq("user", "list", "--server", "127.0.0.1:1", "--coordinator", etcd.url)
    assert both.returncode != 0 and "give one of" in both.stderr

    # Two nodes of cluster c1 copy whatever is changed, once, for both.
    for name in ("a", "b"):
        os.makedirs(tmp_path / name, exist_ok=True)
    stores = [UserStore(str(tmp_path / name)) for name in ("a", "b")]
    followers = [SecurityFollower(ClusterSecurity(etcd.url, "c1"), s, lambda: None,
                                  resync_s=5).start() for s in stores]
    try:
        cluster = ClusterSecurity(etcd.url, "c1")
        cred = make_credential("x")
        errors: list[BaseException] = []

        def add_many(prefix: str) -> None:
            try:
                for i in range(15):
                    cluster.change(lambda d, n=f"{prefix}{i}": d.with_user(n, cred, create=True))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=add_many, args=(p,)) for p in ("p", "q")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors
        want = {"admin"} | {f"{p}{i}" for p in "pq" for i in range(15)}
        assert set(cluster.read()[0].users) == want  # no change lost to another
        for store in stores:
            wait_until(lambda s=store: set(s.users()) == want, 20, "a node to copy them")
            assert store.rules == (Rule.make("admin", "cluster", "", False, "all", True),)
        with pytest.raises(InvalidArgument, match="exists already"):
            cluster.change(lambda d: d.with_user("p1", cred, create=True))
    finally:
        for f in followers:
            f.stop()
