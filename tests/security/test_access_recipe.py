"""The access-rule recipe of docs/security.md, run exactly as the document writes it, gives
app1 a working producer and app2 a working consumer (the Python Consumer and `fmq
consume`) of group billing on the orders. topics."""

from __future__ import annotations

import os
import subprocess

from fmq.client import Consumer, Producer
from tests.doc_blocks import find_block, run_block
from tests.server.harness import FMQ, ServerProcess

from .conftest import PASSWORD, add_user_offline

RECIPE = ("docs/security.md", "fmq acl add ./fmq-data --principal app2")


def test_the_documented_rules_give_app2_a_working_consumer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = str(tmp_path / "fmq-data")
    for user in ("admin", "app1", "app2"):
        add_user_offline(data, user)
    run_block(find_block(*RECIPE), tmp_path, None)
    srv = ServerProcess(data, {"checkpoint_interval_ms": 0}).start()
    try:
        with Producer(srv.address, user="app1", password=PASSWORD) as p:
            for body in (b"first", b"second"):
                p.send("orders.a", body, queue_id=0)
        with Consumer(srv.address, "billing", ["orders.a"], user="app2",
                      password=PASSWORD) as c:
            got = c.poll(10)
            c.commit()
        assert [m.body for m in got] == [b"first", b"second"]
        done = subprocess.run(
            [*FMQ, "consume", "--server", srv.address, "--user", "app2", "--topic", "orders.a",
             "--group", "billing", "--from-beginning", "--max", "2", "--idle-timeout", "10"],
            env={**os.environ, "FMQ_PASSWORD": PASSWORD}, capture_output=True, text=True,
            timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert [line.rsplit(": ", 1)[1] for line in done.stdout.splitlines()] == ["first",
                                                                                   "second"]
    finally:
        srv.kill()

