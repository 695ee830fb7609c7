"""A follower of a secured primary: TLS and a log-in on the replication connection, and a
follower that cannot get in saying why instead of copying anything."""

from __future__ import annotations

import json
import time

from fmq.client import Client, Producer
from fmq.client.tls import TLSOptions
from fmq.protocol import Op
from tests.replication.cluster import SMALL, assert_identical_up_to, pull_all, status
from tests.server.harness import ServerProcess

from .conftest import PASSWORD, add_rule_offline, add_user_offline


def follower_status(follower: ServerProcess) -> dict:
    return status(follower)  # a follower without users, plaintext on loopback


def test_a_follower_copies_a_primary_with_tls_and_users_and_a_wrong_one_is_refused(
        tmp_path, certs, secure_server):
    primary_dir = str(tmp_path / "primary")
    for user in ("admin", "replicator"):
        add_user_offline(primary_dir, user)
    add_rule_offline(primary_dir, "--principal", "admin", "--operation", "all", "--cluster")
    add_rule_offline(primary_dir, "--principal", "admin", "--operation", "all", "--topic", "",
                     "--prefix")
    add_rule_offline(primary_dir, "--principal", "replicator", "--operation", "admin",
                     "--cluster")
    admin = {"tls": TLSOptions(ca_file=certs.ca), "user": "admin", "password": PASSWORD}
    primary_config = {**SMALL, "server": {"tls_cert_file": certs.server_cert}}
    primary = secure_server(primary_config, admin, name="primary")
    good_password = tmp_path / "replicator.password"
    good_password.write_text(PASSWORD + "\n")
    bad_password = tmp_path / "wrong.password"
    bad_password.write_text("not the password\n")

    def follower(name: str, **access: str) -> ServerProcess:
        return secure_server({**SMALL, "follow": primary.address, "server": access},
                             name=name)

    good = follower("good", follow_tls=certs.ca, follow_user="replicator",
                    follow_password_file=str(good_password))
    wrong = follower("wrong", follow_tls=certs.ca, follow_user="replicator",
                     follow_password_file=str(bad_password))
    plaintext = follower("plain", follow_user="replicator",
                         follow_password_file=str(good_password))
    with Producer(primary.address, **admin) as p:
        for i in range(200):
            p.send("t", f"secret-{i}".encode() * 50)
    with Client(primary.address, **admin) as c:  # the primary's end, as admin sees it
        end = json.loads(c.call(Op.REPL_STATUS, {})["json"])["durable_end"]
    deadline = time.monotonic() + 30
    while follower_status(good)["durable_end"] < end:
        assert time.monotonic() < deadline, follower_status(good)
        time.sleep(0.05)
    assert_identical_up_to(primary, good, end)
    copied = sorted(body for queue in pull_all(good, "t", 4) for _q, _o, body in queue)
    assert copied == sorted(f"secret-{i}".encode() * 50 for i in range(200))

    # The others copied nothing and say why (bounded: they retry with back-off).
    while not (follower_status(wrong)["error"] and follower_status(plaintext)["error"]):
        assert time.monotonic() < deadline + 30, (follower_status(wrong),
                                                  follower_status(plaintext))
        time.sleep(0.05)
    assert "AuthenticationFailed" in follower_status(wrong)["error"] or \
        "password" in follower_status(wrong)["error"]
    assert "TLS" in follower_status(plaintext)["error"]
    for refused in (wrong, plaintext):
        assert follower_status(refused)["durable_end"] == 0
    assert PASSWORD not in primary.log() + good.log() + wrong.log()
