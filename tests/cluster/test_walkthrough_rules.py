"""docs/cluster.md's walk-through gives its administrator the rules its own steps need: its
`fmq user add` and `fmq acl add` commands, run as written against a real etcd, let the
admin send to a routed topic and read it in a consumer group ("consumers finish its
queues")."""

from __future__ import annotations

import os
import shlex
import subprocess

from fmq.client import Consumer, Producer
from tests.doc_blocks import bash_commands, find_block
from tests.security.conftest import PASSWORD
from tests.server.harness import FMQ, ServerProcess, wait_until

from .conftest import NEEDS_ETCD
from .kit import CONFIG

pytestmark = NEEDS_ETCD

DOC_ETCD = "etcd://127.0.0.1:2379"


def test_the_walkthroughs_admin_may_consume_in_a_group(tmp_path, etcd):
    block = find_block("docs/cluster.md", "--cluster-name prod --group g1")
    steps = [c for c in bash_commands(block.code)
             if c.startswith(("fmq user add", "fmq acl add"))]
    assert any(c.startswith("fmq user add admin") for c in steps), steps
    env = {**os.environ, "FMQ_NEW_PASSWORD": PASSWORD}
    for command in steps:
        args = shlex.split(command.replace(DOC_ETCD, etcd.url))  # as bash reads it
        done = subprocess.run([*FMQ, *args[1:]], env=env, capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, (command, done.stderr)
    admin = {"user": "admin", "password": PASSWORD}
    node = ServerProcess(str(tmp_path / "g1"), CONFIG, client_options=admin, extra_args=(
        "--coordinator", etcd.url, "--cluster-name", "prod", "--group", "g1")).start()
    try:
        with Producer(node.address, **admin) as producer:
            producer.send("orders", b"o-1")
        got: list = []
        with Consumer(node.address, "billing", ["orders"], start="earliest",
                      **admin) as consumer:
            wait_until(lambda: got.extend(consumer.poll(timeout=0.5)) or got, 60,
                       "the admin to read orders as group billing")
            consumer.commit()
        assert [m.body for m in got] == [b"o-1"]
    finally:
        node.kill()
