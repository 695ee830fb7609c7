"""Progress of the long offline commands: percent, rate and ETA on a terminal's stderr,
nothing when stderr is not a terminal."""

from __future__ import annotations

import io
import os
import pty
import subprocess

import pytest
from fmq.cli.progress import Progress

import fmq
from tests.server.harness import FMQ, run_cli

CFG = fmq.BrokerConfig(segment_size=64 * 1024, max_message_size=4096,
                       checkpoint_interval_ms=0, retention_interval_ms=0)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("progress") / "data")
    with fmq.Broker.open(path, CFG) as b:
        b.send_batch([fmq.Message("t", b"x" * 500) for _ in range(400)])
        b.transactions.prepare([fmq.Message("t", b"open")], "g", tx_id="tx-open")
    return path


def on_a_terminal(*args: str) -> tuple[str, str]:
    """Run ``fmq ARGS`` with stderr on a pseudo-terminal and stdout on a pipe (as
    `fmq ... > file` typed in a terminal); returns (stdout, what the terminal showed)."""
    main, sub = pty.openpty()
    proc = subprocess.Popen([*FMQ, *args], stdout=subprocess.PIPE, stderr=sub, text=True)
    os.close(sub)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    stdout = proc.stdout.read()
    proc.stdout.close()
    assert proc.wait(60) == 0, shown
    return stdout, shown.decode()


@pytest.mark.parametrize("command, label", [
    (("log", "verify"), "verifying"),
    (("log", "dump"), "dumping"),
    (("tx", "list"), "reading the log"),
    (("index", "rebuild"), "rebuilding index"),
])
def test_long_commands_show_percent_rate_and_eta_on_a_terminal(data_dir, command, label):
    stdout, shown = on_a_terminal(*command, data_dir)
    assert stdout  # the command's own output is unchanged, on stdout
    last = shown.rstrip().split("\r")[-1]
    assert last.startswith(f"{label}: 100% "), shown
    assert " of " in last and "/s, ETA 0s" in last


@pytest.mark.parametrize("command", [("log", "verify"), ("log", "dump"), ("tx", "list"),
                                     ("index", "rebuild")])
def test_silent_when_stderr_is_not_a_terminal(data_dir, command):
    out = run_cli(*command, data_dir)
    assert out.returncode == 0 and out.stderr == ""


def test_the_line_has_percent_bytes_rate_and_eta():
    now = [100.0]
    stream = io.StringIO()
    progress = Progress("verifying", 4 * 1024 * 1024, stream, enabled=True,
                        clock=lambda: now[0])
    now[0] += 2.0
    progress.update(1024 * 1024)
    assert stream.getvalue() == ("\rverifying:  25% 1.0 MiB of 4.0 MiB, 512.0 KiB/s, "
                                 "ETA 6s\x1b[K")
    now[0] += 0.05  # too soon to draw again
    progress.update(2 * 1024 * 1024)
    assert stream.getvalue().count("\r") == 1
    now[0] += 1.95
    progress.close()
    assert stream.getvalue().endswith("\rverifying:  50% 2.0 MiB of 4.0 MiB, 512.0 KiB/s, "
                                      "ETA 4s\x1b[K\n")


def test_disabled_progress_writes_nothing():
    stream = io.StringIO()
    with Progress("verifying", 10, stream) as progress:  # StringIO is not a terminal
        progress.update(5)
    assert stream.getvalue() == ""
