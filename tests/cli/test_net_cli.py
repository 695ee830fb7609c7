"""The network commands against a real server: Ctrl-C, topics that do not exist yet,
FMQ_SERVER for `tx list/resolve`."""

from __future__ import annotations

import os
import re
import signal
import subprocess

import pytest

from tests.server.harness import FMQ, ServerProcess, json_lines, run_cli


@pytest.fixture
def server(tmp_path):
    srv = ServerProcess(str(tmp_path / "data")).start()
    yield srv
    srv.kill()


def _as_a_shell_starts_it() -> None:
    """In the child before exec: SIGINT unblocked and at its default, as a terminal's shell
    starts a command. The test process's own state is inherited otherwise, and a blocked
    or ignored SIGINT survives exec (another test's library, a pytest worker)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signal_state(pid: int | str) -> str:
    try:
        with open(f"/proc/{pid}/status") as f:
            return " ".join(line.strip() for line in f if line.startswith(("SigBlk", "SigIgn")))
    except OSError:
        return "gone"


def test_ctrl_c_during_produce_says_how_many_were_acknowledged(server):
    # faulthandler: if the command outlives its Ctrl-C, SIGABRT makes it print every
    # thread's stack. Two CI runs under load saw it sending on, in its send loop, 60 s and
    # 120 s after SIGINT; 40 interrupts at random moments on a quiet machine all ended
    # within a second, so the child now starts with SIGINT as a shell gives it, and a
    # failure says what the test process and the child had blocked or ignored.
    parent_state = _signal_state("self")
    proc = subprocess.Popen([*FMQ, "produce", "--server", server.address, "--topic", "t",
                             "--body", "m{i}", "--count", "200000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
                            preexec_fn=_as_a_shell_starts_it)
    printed = [proc.stdout.readline() for _ in range(20)]  # it is sending
    assert all(line.startswith("sent to t/") for line in printed)
    child_state = _signal_state(proc.pid)
    proc.send_signal(signal.SIGINT)
    try:
        rest, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        _, stacks = proc.communicate(timeout=60)
        raise AssertionError(f"fmq produce still ran 120 s after SIGINT (test process: "
                             f"{parent_state}; child: {child_state}):\n{stacks[-6000:]}"
                             ) from None
    assert proc.returncode == 130 and "Traceback" not in stderr and "Aborted" not in stderr
    match = re.search(r"interrupted: (\d+) of 200,000 messages acknowledged", stderr)
    assert match, stderr
    lines = len(printed) + len(rest.splitlines())
    assert lines <= int(match.group(1)) < 200_000


def test_consume_on_a_topic_that_does_not_exist_yet_says_so(server):
    out = run_cli("consume", "--server", server.address, "--topic", "nothere",
                  "--idle-timeout", "0.5")
    assert out.returncode == 0
    assert ("topic 'nothere' has no consumable message yet (no message was ever sent to it); "
            "waiting for its first message for up to 0.5s (--idle-timeout)") in out.stderr
    assert run_cli("produce", "--server", server.address, "--topic", "here",
                   "--body", "x").returncode == 0
    out = run_cli("consume", "--server", server.address, "--topic", "here",
                  "--idle-timeout", "0.5")
    assert out.returncode == 0 and "no consumable message" not in out.stderr
    assert "consumed 1 message\n" in out.stderr


def test_tx_list_and_resolve_use_fmq_server_when_no_directory_is_named(server, tmp_path):
    out = run_cli("produce", "--server", server.address, "--topic", "t", "--body", "x",
                  "--tx", "unknown", "--json")
    [tx] = json_lines(out.stdout)
    env = {**os.environ, "FMQ_SERVER": server.address}
    listed = subprocess.run([*FMQ, "tx", "list", "--json"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert [t["tx_id"] for t in json_lines(listed.stdout)] == [tx["tx_id"]]
    resolved = subprocess.run([*FMQ, "tx", "resolve", "--group", "fmq-cli", tx["tx_id"],
                               "rollback", "--json"],
                              env=env, capture_output=True, text=True, timeout=60)
    assert json_lines(resolved.stdout) == [{"tx_id": tx["tx_id"], "state": "rollback"}]
    # A directory named on the command line wins over FMQ_SERVER (it is never sent there).
    elsewhere = subprocess.run([*FMQ, "tx", "list", str(tmp_path)], env=env,
                               capture_output=True, text=True, timeout=60)
    assert elsewhere.returncode == 1 and "is not an FMQ data directory" in elsewhere.stderr
