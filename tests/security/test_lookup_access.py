"""``fmq message find`` and ``fmq message get`` need only ``consume`` on the topic
(docs/security.md): a user without ``admin`` on the cluster finds a message by its key, with
the segment file left unnamed (naming it reads STATS, an administrator's request). A real
server with SCRAM users, driven by the real ``fmq`` command (issue 37, item 9)."""

from __future__ import annotations

import json
import os
import subprocess

from fmq.client import Producer
from tests.server.harness import FMQ

from .conftest import PASSWORD, QUICK_SLOW_DOWN, add_rule_offline, add_user_offline


def as_reader(server: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FMQ, *args, "--server", server, "--user", "reader"],
                          env={**os.environ, "FMQ_PASSWORD": PASSWORD}, capture_output=True,
                          text=True, timeout=120, check=False)


def test_a_user_with_only_consume_finds_and_gets_messages_by_key(tmp_path, secure_server):
    data = str(tmp_path / "data")
    for user in ("admin", "alice", "reader"):
        add_user_offline(data, user)
    add_rule_offline(data, "--principal", "admin", "--operation", "all", "--cluster")
    add_rule_offline(data, "--principal", "alice", "--operation", "produce", "--topic",
                     "orders")
    add_rule_offline(data, "--principal", "reader", "--operation", "consume", "--topic",
                     "orders")
    srv = secure_server(QUICK_SLOW_DOWN, {"user": "admin", "password": PASSWORD})
    with Producer(srv.address, user="alice", password=PASSWORD) as p:
        sent = p.send("orders", b"the order", key="order-7", queue_id=1)

    found = as_reader(srv.address, "message", "find", "--key", "order-7", "--topic", "orders")
    assert found.returncode == 0, found.stderr
    assert "'the order'" in found.stdout and "orders queue 1 offset 0" in found.stdout
    assert "naming it needs admin" in found.stdout
    as_json = as_reader(srv.address, "message", "find", "--key", "order-7", "--topic",
                        "orders", "--json")
    assert as_json.returncode == 0, as_json.stderr
    [d] = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert (d["body"], d["offset"], d["segment"]) == ("the order", sent.offset, None)

    got = as_reader(srv.address, "message", "get", "--topic", "orders", "--queue", "1",
                    "--offset", "0")
    assert got.returncode == 0, got.stderr
    assert "'the order'" in got.stdout
    # Consume on orders does not reach another topic: the refusal stands.
    other = as_reader(srv.address, "message", "find", "--key", "order-7", "--topic", "audit")
    assert other.returncode == 1 and "access denied" in other.stderr.lower(), other.stderr
