"""Certificates made in the test with trustme, and servers that use them."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from tests.server.conftest import FAST, start_server
from tests.server.harness import FMQ, ServerProcess

__all__ = ["FAST", "PASSWORD", "Certs", "auth_server", "certs", "secure_server", "start_server"]


@dataclass
class Certs:
    ca: str  # the CA that signed the server's and the client's certificates
    other_ca: str  # a CA that signed nothing here
    server_cert: str  # chain and key in one file, for 127.0.0.1 and localhost
    client_cert: str  # chain and key in one file, signed by ``ca``
    localhost_only: str  # a server certificate naming only "localhost"

    def server_config(self, mutual: bool = False, cert: str | None = None) -> dict:
        tls = {"tls_cert_file": cert or self.server_cert}
        if mutual:
            tls["tls_client_ca_file"] = self.ca
        return {**FAST, "server": {**FAST["server"], **tls}}


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Certs:
    where: Path = tmp_path_factory.mktemp("certs")
    ca, other = trustme.CA(), trustme.CA()

    def write(name: str, blob) -> str:
        path = where / name
        blob.write_to_path(str(path))
        return str(path)

    def write_pem(name: str, cert) -> str:
        path = where / name
        cert.private_key_and_cert_chain_pem.write_to_path(str(path))
        return str(path)

    return Certs(
        ca=write("ca.pem", ca.cert_pem), other_ca=write("other-ca.pem", other.cert_pem),
        server_cert=write_pem("server.pem", ca.issue_cert("127.0.0.1", "localhost")),
        client_cert=write_pem("client.pem", ca.issue_cert("client@example.com")),
        localhost_only=write_pem("localhost.pem", ca.issue_cert("localhost")))


@pytest.fixture
def secure_server(tmp_path):
    """secure_server(config, client_options, name, extra_args) -> a running ServerProcess
    that a client with ``client_options`` can reach; all are killed at the end."""
    started: list[ServerProcess] = []

    def start(config: dict | None = None, client_options: dict | None = None,
              name: str = "data", extra_args: tuple[str, ...] = ()) -> ServerProcess:
        srv = ServerProcess(str(tmp_path / name), config, client_options=client_options,
                            extra_args=extra_args)
        started.append(srv)
        return srv.start()

    yield start
    for srv in started:
        srv.kill()


#: The slow-down after failed log-ins, short enough for thousands of failures in a test.
QUICK_SLOW_DOWN = {**FAST, "server": {**FAST["server"], "auth_failure_delay_ms": 1,
                                      "auth_failure_max_delay_ms": 20}}
PASSWORD = "correct horse battery staple"  # noqa: S105 - a test password, grepped for


def add_user_offline(data_dir: str, user: str, password: str = PASSWORD) -> None:
    """`fmq user add` on a stopped broker's directory (created by an embedded open)."""
    import os

    import fmq

    if not os.path.exists(data_dir):
        fmq.Broker.open(data_dir).close()
    env = {**os.environ, "FMQ_NEW_PASSWORD": password}
    out = subprocess.run([*FMQ, "user", "add", user, "--data-dir", data_dir], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr


def add_rule_offline(data_dir: str, *args: str) -> None:
    """`fmq acl add DATA_DIR ARGS...` on a stopped broker."""
    out = subprocess.run([*FMQ, "acl", "add", data_dir, *args], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr


#: admin may do everything; every user may describe topics; alice may produce to any topic.
BASE_RULES = [
    ("--principal", "admin", "--operation", "all", "--cluster"),
    ("--principal", "admin", "--operation", "all", "--topic", "", "--prefix"),
    ("--principal", "admin", "--operation", "all", "--group", "", "--prefix"),
    ("--principal", "admin", "--operation", "all", "--producer-group", "", "--prefix"),
    ("--principal", "*", "--operation", "describe", "--topic", "", "--prefix"),
    ("--principal", "alice", "--operation", "produce", "--topic", "", "--prefix"),
]


def add_users_and_base_rules(data_dir: str) -> None:
    """Users admin and alice (password PASSWORD) and BASE_RULES, on a stopped broker."""
    for user in ("admin", "alice"):
        add_user_offline(data_dir, user)
    for rule in BASE_RULES:
        add_rule_offline(data_dir, *rule)


@pytest.fixture
def auth_server(tmp_path, secure_server):
    """A plaintext server with users admin and alice (password PASSWORD) and BASE_RULES."""
    add_users_and_base_rules(str(tmp_path / "data"))
    return secure_server(QUICK_SLOW_DOWN, {"user": "admin", "password": PASSWORD})
