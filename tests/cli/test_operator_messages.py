"""Messages that must not mislead an operator: a topic whose messages are scheduled, a
mistyped group name, one rule for times without a zone, the default server of the commands
that can also work on a data directory (`tx`, `user`, `acl`)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fmq.cli.net_cmds import DEFAULT_SERVER

from tests.server.harness import FMQ, ServerProcess, json_lines, run_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server(tmp_path):
    srv = ServerProcess(str(tmp_path / "data")).start()
    yield srv
    srv.kill()


def test_consume_after_a_delayed_send_says_the_message_is_scheduled(server):
    sent = run_cli("produce", "--server", server.address, "--topic", "later", "--body", "x",
                   "--delay", "3600")
    assert sent.returncode == 0, sent.stderr
    out = run_cli("consume", "--server", server.address, "--topic", "later",
                  "--idle-timeout", "0.5")
    assert out.returncode == 0, out.stderr
    assert "no message was ever sent" not in out.stderr and "does not exist" not in out.stderr
    assert ("topic 'later' has no consumable message yet (1 message sent to it is scheduled "
            "for later)") in out.stderr
    assert "consumed 0 messages" in out.stderr


def test_groups_with_an_unknown_group_says_so_and_fails(server):
    out = run_cli("groups", "nosuch", "--server", server.address)
    assert out.returncode == 1
    assert "unknown consumer group 'nosuch'" in out.stderr and "Traceback" not in out.stderr
    assert "no consumer groups" not in out.stdout
    assert run_cli("groups", "--server", server.address).returncode == 0  # none at all: fine


def test_a_time_without_a_zone_is_utc_for_deliver_at_and_to_time(server):
    utc_2027 = int(datetime(2027, 1, 1, tzinfo=UTC).timestamp() * 1000)
    for given in ("2027-01-01", "2027-01-01T00:00:00", "2027-01-01T01:00:00+01:00",
                  str(utc_2027)):
        out = run_cli("produce", "--server", server.address, "--topic", "t", "--body", "x",
                      "--deliver-at", given, "--json")
        assert out.returncode == 0, (given, out.stderr)
        assert json_lines(out.stdout)[0]["deliver_at"] == utc_2027, given
    human = run_cli("produce", "--server", server.address, "--topic", "t", "--body", "x",
                    "--deliver-at", "2027-01-01")
    assert "at 2027-01-01 00:00:00 UTC" in human.stdout, human.stdout
    # --to-time reads the same forms; a bad one names the rule in the same words.
    for option, args in (("--deliver-at", ("produce", "--topic", "t", "--body", "x")),
                         ("--to-time", ("groups", "reset-offsets", "g", "--topic", "t"))):
        bad = run_cli(*args, option, "next week", "--server", server.address)
        assert bad.returncode == 2 and option in bad.stderr
        assert "UTC unless it names a zone" in bad.stderr, bad.stderr
        helptext = run_cli(*args[:2] if args[0] == "groups" else args[:1], "--help").stdout
        assert "one without a zone is UTC" in " ".join(helptext.split()), helptext
    # A reset plan needs a topic that exists (scheduled messages alone do not make it).
    assert run_cli("produce", "--topic", "t", "--body", "now",
                   "--server", server.address).returncode == 0
    plan = run_cli("groups", "reset-offsets", "g", "--topic", "t", "--to-time", "2027-01-01",
                   "--server", server.address, "--json")
    assert plan.returncode == 0, plan.stderr


def _default_port_free() -> bool:
    host, port = DEFAULT_SERVER.split(":")
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) != 0


#: Runs a command in a network namespace of its own (its own loopback, on which the default
#: port is free even while a server of the user's listens on the machine's).
OWN_NETWORK = ["unshare", "--net", "--map-root-user"]


def _own_network_available() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    probe = subprocess.run([*OWN_NETWORK, "ip", "link", "set", "lo", "up"],
                           capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def test_tx_user_and_acl_default_to_the_local_server_like_every_network_command(tmp_path):
    # The default address is the point of this test: a server must listen on it. In a
    # network namespace of its own the test never meets the README's quick-start server
    # (or any other) on the machine's 127.0.0.1:9876.
    if _own_network_available():
        done = subprocess.run(
            [*OWN_NETWORK, sys.executable, "-c",
             "import sys; from tests.cli.test_operator_messages import "
             "default_server_commands as run; run(sys.argv[1], own_network=True)",
             str(tmp_path)],
            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    elif _default_port_free():
        default_server_commands(str(tmp_path))
    else:
        pytest.skip(f"something listens on {DEFAULT_SERVER} (a server of yours?) and this "
                    f"machine gives the test no network namespace of its own (unshare)")


def default_server_commands(tmp: str, own_network: bool = False) -> None:
    """A server on the default address; `tx`, `acl` and `user` without an address reach it.
    ``own_network``: run in a new network namespace, whose loopback starts down."""
    if own_network:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=30)
    assert _default_port_free(), f"something already listens on {DEFAULT_SERVER}"
    srv = ServerProcess(os.path.join(tmp, "data"), port=int(DEFAULT_SERVER.split(":")[1]))
    srv.start()
    env = {k: v for k, v in os.environ.items() if k != "FMQ_SERVER"}

    def fmq(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*FMQ, *args], env=env, capture_output=True, text=True,
                              timeout=60)

    try:
        opened = fmq("produce", "--topic", "t", "--body", "x", "--tx", "unknown", "--json")
        assert opened.returncode == 0, opened.stderr
        [tx] = json_lines(opened.stdout)
        listed = fmq("tx", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [t["tx_id"] for t in json_lines(listed.stdout)] == [tx["tx_id"]]
        # acl and user go to the same server: it answers (here: no users yet, so no
        # rule may be added over the network), where before they refused to guess.
        added = fmq("acl", "add", "--principal", "alice", "--topic", "t",
                    "--operation", "consume")
        assert added.returncode == 1 and "this server has no users yet" in added.stderr
        for args in (("acl", "list"), ("user", "list")):
            shown = fmq(*args)
            assert "give DATA_DIR" not in shown.stderr and "Traceback" not in shown.stderr
            assert shown.returncode == 0 or "no users yet" in shown.stderr, shown.stderr
        # A directory named on the command line still wins: never sent to a server.
        offline = fmq("tx", "list", tmp)
        assert offline.returncode == 1 and "is not an FMQ data directory" in offline.stderr
    finally:
        srv.kill()
