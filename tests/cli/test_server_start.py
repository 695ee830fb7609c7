"""``fmq server`` and ``fmq demo`` on the usual start-up mistakes, as real processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile

from click.testing import CliRunner
from fmq.cli.main import cli

import fmq
import fmq.server.server  # noqa: F401 - loaded before a test drops root (see below)
from tests.server.harness import FMQ, run_cli, wait_until_serving


def test_a_port_clash_is_reported_before_recovery_touches_the_data_dir(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data_dir = tmp_path / "data"
        out = run_cli("server", "--data-dir", str(data_dir), "--port", str(port))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr
    assert not data_dir.exists()  # the port was tried first: no recovery, no directory


def test_log_level_warning_still_says_where_the_server_listens(tmp_path):
    proc = subprocess.Popen([*FMQ, "server", str(tmp_path / "data"), "--port", "0",
                             "--log-level", "WARNING"],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()  # blocks until the first line; the server prints it
        match = re.fullmatch(r"fmq server listening on 127\.0\.0\.1:(\d+)\n", line)
        assert match, line
        assert wait_until_serving(f"127.0.0.1:{match.group(1)}", proc, 30)
    finally:
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0 and "INFO" not in rest


def test_a_data_dir_below_a_file_is_one_clear_line(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    out = run_cli("server", "--data-dir", str(afile / "sub"), "--port", "0")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(
        f"error: Not a directory: {afile / 'sub'}")


def test_an_unwritable_data_dir_is_one_clear_line():
    # Not under tmp_path: pytest makes that readable by its owner only, and the command runs
    # as another user when the tests run as root.
    parent = tempfile.mkdtemp(prefix="fmq-unwritable-")
    os.chmod(parent, 0o755)
    data_dir = os.path.join(parent, "data")
    with fmq.Broker.open(data_dir):
        pass
    os.chmod(data_dir, 0o555)
    os.chmod(os.path.join(data_dir, "LOCK"), 0o444)
    try:
        status, stderr = _as_unprivileged_user(
            lambda: CliRunner().invoke(cli, ["server", data_dir, "--port", "0"]))
    finally:
        os.chmod(data_dir, 0o755)
        shutil.rmtree(parent)
    assert status == 1 and "Traceback" not in stderr, stderr
    [line] = stderr.strip().splitlines()
    assert line.startswith(f"error: Permission denied: {data_dir}/LOCK (")
    assert "needs read and write access there" in line


def _as_unprivileged_user(invoke):
    """Run ``invoke`` (a CliRunner call) where file permissions apply: in a forked child
    that drops root, when the tests run as root; returns (exit code, stderr)."""
    if os.geteuid() != 0:
        result = invoke()
        return result.exit_code, result.stderr + repr(result.exception)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery, just the command (modules it needs are
        # imported already: an unprivileged user may not read the interpreter's library)
        os.close(read)
        try:
            os.setgid(65534)
            os.setuid(65534)
            result = invoke()
            report = f"{result.exit_code}\n{result.stderr}"
            if not isinstance(result.exception, SystemExit | None):
                report += f"Traceback: {result.exception!r}"
            os.write(write, report.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        status, _, stderr = f.read().partition("\n")
    os.waitpid(pid, 0)
    return int(status), stderr


def test_demo_works_beside_a_running_broker_and_leaves_its_data_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with fmq.Broker.open("fmq-data") as server_side:  # as `fmq server` with its default
        before = server_side.stats()["log_end"]
        result = CliRunner().invoke(cli, ["demo"])
        assert result.exit_code == 0, (result.output, result.exception)
        assert "prepared" in result.stdout and server_side.stats()["log_end"] == before
        assert "open transactions" in result.stdout and "{" not in result.stdout  # no raw dict
    scratch = re.search(r"demo data in (\S+)", result.stdout).group(1)
    assert not os.path.exists(scratch)  # the temporary directory is gone


def test_demo_on_a_locked_data_dir_is_one_clear_line(tmp_path):
    with fmq.Broker.open(str(tmp_path / "d")):
        result = CliRunner().invoke(cli, ["demo", "--data-dir", str(tmp_path / "d")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "is in use by another FMQ process" in result.stderr


def test_the_server_runs_on_uvloop_when_installed_and_on_asyncio_when_asked(tmp_path):
    for choice, expected in (("auto", "uvloop"), ("asyncio", "asyncio")):
        config = tmp_path / f"{choice}.json"
        config.write_text(json.dumps({"server": {"event_loop": choice}}))
        proc = subprocess.Popen([*FMQ, "server", str(tmp_path / choice), "--port", "0",
                                 "--config", str(config)], stderr=subprocess.PIPE, text=True)
        try:
            lines: list[str] = []
            while not any("listening on" in ln for ln in lines) and len(lines) < 50:
                lines.append(proc.stderr.readline())  # the server prints it before serving
            listening = next(ln for ln in lines if "listening on" in ln)
            address = re.search(r"127\.0\.0\.1:\d+", listening).group()
            assert wait_until_serving(address, proc, 30)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert any(f"event loop: {expected}" in ln for ln in lines), lines


def test_an_unknown_event_loop_is_one_clear_line(tmp_path):
    config = tmp_path / "loop.json"
    config.write_text(json.dumps({"server": {"event_loop": "trio"}}))
    out = run_cli("server", str(tmp_path / "data"), "--port", "0", "--config", str(config))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "event_loop must be one of auto, asyncio, uvloop, not 'trio'" in out.stderr
