"""A user who may not produce to a topic is told exactly that by `fmq produce`: no line
about routing first (a ROUTE refused for the same missing right is no routing matter)."""

from __future__ import annotations

import os
import subprocess

from tests.server.harness import FMQ

from .conftest import PASSWORD, QUICK_SLOW_DOWN, add_rule_offline, add_user_offline


def test_a_refused_produce_says_only_that_it_was_refused(tmp_path, secure_server):
    data = str(tmp_path / "data")
    for user in ("admin", "bob"):
        add_user_offline(data, user)
    add_rule_offline(data, "--principal", "admin", "--operation", "all", "--cluster")
    srv = secure_server(QUICK_SLOW_DOWN, {"user": "admin", "password": PASSWORD})
    env = {**os.environ, "FMQ_USER": "bob", "FMQ_PASSWORD": PASSWORD}
    out = subprocess.run([*FMQ, "produce", "--topic", "orders", "--body", "x",
                          "--server", srv.address], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 1
    assert "access denied: produce on topic 'orders'" in out.stderr, out.stderr
    assert "without routing" not in out.stderr and "routes" not in out.stderr, out.stderr
