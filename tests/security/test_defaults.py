"""Safe defaults: no users, loopback only; the slow-down after failed log-ins."""

from __future__ import annotations

import re
import subprocess

import pytest

from fmq.client import Client, Connection
from fmq.errors import AuthenticationFailed, InvalidArgument
from fmq.protocol import Op
from fmq.server.net.exposure import is_loopback
from tests.server.harness import FMQ, ServerProcess, free_port

from .conftest import FAST, PASSWORD, add_rule_offline, add_user_offline

pytestmark = pytest.mark.timeout(120)


def test_loopback_names():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("") and not is_loopback("::")


def test_without_users_the_server_refuses_to_listen_beyond_loopback(tmp_path):
    data = str(tmp_path / "data")
    out = subprocess.run([*FMQ, "server", "--data-dir", data, "--host", "0.0.0.0",
                          "--port", str(free_port())], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 1
    assert "refusing to listen on '0.0.0.0' without authentication" in out.stderr
    assert "fmq user add admin" in out.stderr and "--insecure" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("how", ["insecure", "with a user"])
def test_beyond_loopback_with_insecure_or_with_users(tmp_path, how):
    data = str(tmp_path / "data")
    options: dict = {}
    extra: tuple[str, ...] = ("--host", "0.0.0.0")
    if how == "insecure":
        extra += ("--insecure",)
    else:
        add_user_offline(data, "admin")
        options = {"user": "admin", "password": PASSWORD}
    srv = ServerProcess(data, FAST, client_options=options, extra_args=extra)
    try:
        srv.start()
        assert "listening on 0.0.0.0" in srv.log()
    finally:
        srv.kill()


def test_the_last_user_cannot_be_removed_over_the_network(tmp_path, secure_server):
    data = str(tmp_path / "data")
    add_user_offline(data, "admin")
    add_rule_offline(data, "--principal", "admin", "--operation", "admin", "--cluster")
    srv = secure_server(FAST, {"user": "admin", "password": PASSWORD})
    with Client(srv.address, user="admin", password=PASSWORD) as client, \
            pytest.raises(InvalidArgument, match="is the last user"):
        client.call(Op.USER_REMOVE, {"user": "admin"})


def test_failed_log_ins_wait_longer_per_connection_and_per_address(tmp_path, secure_server):
    data = str(tmp_path / "data")
    add_user_offline(data, "alice")
    config = {**FAST, "server": {**FAST["server"], "auth_failure_delay_ms": 10,
                                 "auth_failure_max_delay_ms": 10_000}}
    srv = secure_server(config, {"user": "alice", "password": PASSWORD})

    def fail_on(conn: Connection) -> None:
        with pytest.raises(AuthenticationFailed):
            conn.request(Op.AUTH_START, {"mechanism": "SCRAM-SHA-256", "message": "junk"}, 30)

    first = Connection(("127.0.0.1", srv.port))
    try:
        for _ in range(3):
            fail_on(first)
    finally:
        first.close()
    second = Connection(("127.0.0.1", srv.port))
    try:
        fail_on(second)
        with Client(srv.address, user="alice", password=PASSWORD) as ok:  # others log in
            ok.ping()
            assert ok.principal == "alice"
    finally:
        second.close()
    waits = [int(ms) for ms in re.findall(r"authentication failed .*; answering in (\d+) ms",
                                          srv.log())]
    assert waits[:3] == [10, 40, 160]  # one connection: its count and its address's
    assert waits[3] == 80  # a new connection from the same address does not start over
