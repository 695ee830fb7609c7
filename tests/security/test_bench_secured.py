"""`fmq bench` against a server with TLS and users: every load process connects over TLS
and logs in; without them the run fails with one clear line."""

from __future__ import annotations

import json
import os
import subprocess

from fmq.client.tls import TLSOptions
from tests.server.harness import FMQ

from .conftest import FAST, PASSWORD, add_rule_offline, add_user_offline


def bench(server: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*FMQ, "bench", "produce", "--server", server, "--producers", "4",
                           "--duration", "1", "--processes", "2", *args],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, **(env or {})})


def test_bench_speaks_tls_and_logs_in(tmp_path, certs, secure_server):
    data = str(tmp_path / "data")
    add_user_offline(data, "loader")
    for rule in (("--principal", "loader", "--operation", "all", "--cluster"),
                 ("--principal", "loader", "--operation", "all", "--topic", "", "--prefix")):
        add_rule_offline(data, *rule)
    config = {**FAST, "server": {**FAST["server"], "tls_cert_file": certs.server_cert}}
    srv = secure_server(config, {"tls": TLSOptions(ca_file=certs.ca), "user": "loader",
                                 "password": PASSWORD})
    login = {"FMQ_PASSWORD": PASSWORD}
    ok = bench(srv.address, "--tls", "--ca-file", certs.ca, "--user", "loader", "--json",
               env=login)
    assert ok.returncode == 0, ok.stdout + ok.stderr  # the report says what failed
    report = json.loads(ok.stdout)
    assert report["messages"] > 0 and not report["errors"], report
    assert PASSWORD not in ok.stdout + ok.stderr + srv.log()

    plaintext = bench(srv.address, "--user", "loader", env=login)
    assert plaintext.returncode == 1 and "Traceback" not in plaintext.stderr
    assert "requires TLS" in plaintext.stderr, plaintext.stderr
    wrong = bench(srv.address, "--tls", "--ca-file", certs.ca, "--user", "loader",
                  env={"FMQ_PASSWORD": "wrong"})
    assert wrong.returncode == 1 and "Traceback" not in wrong.stderr, wrong.stderr
