"""What a newcomer meets on a first try, against a real server: every refusal names the
real mistake, once, in the words that fit the command (no advice to create a topic one is
deleting, no option named three times, no "None" or "[Errno 111]"), and a command given
``--json`` says its error in JSON too."""

from __future__ import annotations

import os
import socket
import subprocess
import threading

import pytest

from fmq.client import Producer
from tests.server.harness import FMQ, ServerProcess, json_lines, run_cli, wait_until


@pytest.fixture
def server(tmp_path):
    srv = ServerProcess(str(tmp_path / "data")).start()
    yield srv
    srv.kill()


def test_tx_resolve_without_group_names_the_server_it_would_ask(server):
    env = {**os.environ, "FMQ_SERVER": server.address}
    out = subprocess.run([*FMQ, "tx", "resolve", "some-tx", "commit"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "with --server" not in out.stderr, out.stderr  # no --server was given
    assert "--group GROUP is required" in out.stderr and server.address in out.stderr
    assert "DATA_DIR to resolve offline" in out.stderr


def test_reset_offsets_takes_one_target_and_an_existing_topic(server):
    both = run_cli("groups", "reset-offsets", "g", "--topic", "t", "--to-latest",
                   "--to-earliest", "--server", server.address)
    assert both.returncode == 2, both.stdout
    assert "not --to-earliest and --to-latest" in both.stderr, both.stderr
    missing = run_cli("groups", "reset-offsets", "g", "--topic", "nosuch", "--to-earliest",
                      "--server", server.address)
    assert missing.returncode == 1, missing.stdout
    assert "topic nosuch does not exist" in missing.stderr and "nothing to reset" in missing.stderr
    executed = run_cli("groups", "reset-offsets", "g", "--topic", "nosuch", "--to-earliest",
                       "--execute", "--server", server.address)
    assert executed.returncode == 1
    assert run_cli("groups", "g", "--server", server.address).returncode == 1  # nothing moved
    # A topic that exists still gets its plan, and executing it logs numbers, not None.
    with Producer(server.address) as producer:
        producer.send("t", b"x", queue_id=0)
    plan = run_cli("groups", "reset-offsets", "g", "--topic", "t", "--queue", "0",
                   "--to-latest", "--server", server.address, "--json")
    assert plan.returncode == 0, plan.stderr
    assert [(c["old"], c["new"]) for c in json_lines(plan.stdout)] == [(None, 1)]
    done = run_cli("groups", "reset-offsets", "g", "--topic", "t", "--queue", "0",
                   "--to-latest", "--execute", "--server", server.address)
    assert done.returncode == 0, done.stderr
    wait_until(lambda: "reset group 'g' offset of t/0" in server.log(), 10, "the reset's log")
    line = next(x for x in server.log().splitlines() if "reset group 'g' offset" in x)
    assert "None" not in line and "none committed -> 1" in line, line


def test_message_get_on_an_unknown_topic_says_the_topic_does_not_exist(server):
    out = run_cli("message", "get", "--topic", "nosuch", "--queue", "0", "--offset", "0",
                  "--server", server.address)
    assert out.returncode == 1
    assert "topic nosuch does not exist" in out.stderr, out.stderr
    assert "holds no message" not in out.stderr and "topic create" not in out.stderr
    # An existing topic's empty queue is still told as such.
    assert run_cli("topic", "create", "empty", "--server", server.address).returncode == 0
    empty = run_cli("message", "get", "--topic", "empty", "--queue", "0", "--offset", "0",
                    "--server", server.address)
    assert empty.returncode == 1 and "the queue holds no message" in empty.stderr


def test_deleting_an_unknown_topic_does_not_suggest_creating_it(server):
    out = run_cli("topic", "delete", "nosuch", "--server", server.address)
    assert out.returncode == 1
    assert "topic nosuch does not exist" in out.stderr and "nothing to delete" in out.stderr
    assert "topic create" not in out.stderr, out.stderr


def test_a_bad_retention_names_the_option_once(server):
    out = run_cli("topic", "create", "t", "--retention", "7 days", "--server", server.address)
    assert out.returncode == 2
    assert out.stderr.count("--retention") == 1, out.stderr
    assert "must be a duration" in out.stderr and "'7 days'" in out.stderr


def test_errors_of_a_json_command_are_json_on_stderr(server):
    unknown = run_cli("topic", "describe", "nosuch", "--server", server.address, "--json")
    assert unknown.returncode == 1 and unknown.stdout == ""
    [error] = json_lines(unknown.stderr)
    assert error["type"] == "UnknownTopic" and "nosuch does not exist" in error["error"]
    usage = run_cli("groups", "reset-offsets", "g", "--to-latest", "--to-earliest",
                    "--server", server.address, "--json")
    assert usage.returncode == 2
    assert json_lines(usage.stderr) == [{
        "error": "give exactly one of --to-earliest, --to-latest, --to-time, --to-offset "
                 "(not --to-earliest and --to-latest)",
        "type": "UsageError"}]
    bad_value = run_cli("topic", "create", "t", "--retention", "7 days", "--json",
                        "--server", server.address)
    assert bad_value.returncode == 2 and json_lines(bad_value.stderr)[0]["type"] == "UsageError"
    # Without --json the same errors stay plain text.
    plain = run_cli("topic", "describe", "nosuch", "--server", server.address)
    assert plain.stderr.startswith("error: ") and not plain.stderr.startswith("{")


def test_a_peer_that_hangs_up_at_once_is_not_taken_for_a_lost_fmq_connection():
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    stop = threading.Event()

    def hang_up() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.close()

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    try:
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        out = run_cli("stats", "--server", address, timeout=90)
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "closed the connection before answering the FMQ handshake" in out.stderr, out.stderr
    assert "not an FMQ server" in out.stderr
    assert "nothing of it was applied" not in out.stderr


def test_a_coordinator_that_is_not_there_is_told_in_words():
    out = run_cli("cluster", "status", "--coordinator", "etcd://127.0.0.1:1")
    assert out.returncode == 1
    assert "connection refused (nothing listens at that address)" in out.stderr, out.stderr
    assert "Errno" not in out.stderr and "ConnectionFailedError" not in out.stderr



def test_a_message_over_the_limit_is_told_in_the_limits_unit(server):
    out = run_cli("produce", "--topic", "t", "--server", server.address,
                  input="x" * 5_000_000 + "\n")
    assert out.returncode == 1
    assert ("message body is 4.8 MiB (5000000 bytes), the limit (max_message_size) is "
            "4.0 MiB (4194304 bytes)") in out.stderr, out.stderr
