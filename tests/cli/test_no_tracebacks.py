"""Every ``fmq`` command against the usual mistakes: each ends with one clear error line and
a non-zero exit, never a Python traceback.

Commands are found by walking the command tree, so a command added later is covered by the
mistakes its parameters admit (a data directory, a server address, a config file)."""

from __future__ import annotations

import socket

import click
import pytest
from click.testing import CliRunner
from fmq.cli.main import cli

import fmq

#: Arguments a command needs besides the one the mistake is about.
EXTRA_ARGS = {
    ("log", "repair"): ["--cut-at", "0", "--yes"],
    ("tx", "resolve"): ["--group", "g", "tx-1", "commit"],
    ("produce",): ["--body", "x"],
}


def leaf_commands(group: click.Group = cli, prefix: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaf_commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def param_names(command: click.Command) -> set[str]:
    return {p.name for p in command.params}


def required_options(command: click.Command) -> list[str]:
    """Plausible values for the required options, so that only the mistake is wrong."""
    args = []
    for p in command.params:
        if isinstance(p, click.Option) and p.required:
            args += [p.opts[0], "1" if isinstance(p.type, click.types.IntParamType) else "t"]
    return args


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    root = tmp_path_factory.mktemp("mistakes")
    afile = root / "afile"
    afile.write_text("not a directory")
    empty = root / "empty"
    empty.mkdir()
    other = root / "other"  # a directory with files, as /etc: not a data dir
    (other / "log").mkdir(parents=True)
    (other / "passwd").write_text("root:x:0:0")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    bad_config = root / "bad.json"
    bad_config.write_text('{"segment_size": "64 parsecs"}')
    return {"missing": str(root / "missing"), "file": str(afile), "empty": str(empty),
            "other": str(other), "below_file": str(afile / "sub"), "closed": closed,
            "bad_config": str(bad_config)}


def mistakes(path: tuple[str, ...], command: click.Command, places: dict):
    """(what, argv) for every usual mistake this command admits."""
    names = param_names(command)
    extra = EXTRA_ARGS.get(path, []) + required_options(command)
    yield "an option that does not exist", [*path, "--no-such-option"]
    offline = command.name in ("demo", "server")  # these create their data dir
    dir_params = [p for p in command.params if "data_dir" in (p.name or "")]
    positional = any(isinstance(p, click.Argument) for p in dir_params)
    if dir_params and not offline:
        for what in ("missing", "file", "empty", "other"):
            if positional:
                yield f"data dir {what}", [*path, places[what], *extra]
            else:
                yield f"--data-dir {what}", [*path, "--data-dir", places[what], *extra]
    if offline:
        port = ["--port", "0"] if "port" in names else []
        yield "data dir below a file", [*path, "--data-dir", places["below_file"], *port]
    if "server" in names:
        yield "server not running", [*path, "--server", places["closed"], *extra]
        yield "server address malformed", [*path, "--server", "no-such-host.invalid:x", *extra]
    if "config_file" in names:
        yield "config file wrong", [*path, "--config", places["bad_config"], "--port", "0"]


CASES = [(path, command) for path, command in leaf_commands()]


def check_one_clear_line(argv: list[str]) -> None:
    result = CliRunner().invoke(cli, argv)
    assert isinstance(result.exception, SystemExit), (argv, result.exception, result.output)
    assert result.exit_code != 0, (argv, result.output)
    assert "Traceback" not in result.output, (argv, result.output)
    errors = [line for line in result.stderr.splitlines()
              if line.lower().startswith("error:")]
    assert len(errors) == 1 and len(errors[0]) > len("error: ") + 10, (argv, result.stderr)


@pytest.mark.parametrize("path, command", CASES, ids=[" ".join(p) for p, _ in CASES])
def test_every_command_reports_the_usual_mistakes_in_one_line(path, command, places):
    for _what, argv in mistakes(path, command, places):
        check_one_clear_line(argv)


def test_commands_that_change_a_data_dir_refuse_one_in_use(tmp_path):
    data_dir = str(tmp_path / "data")
    with fmq.Broker.open(data_dir):
        for argv in (["index", "rebuild", data_dir],
                     ["log", "repair", data_dir, "--cut-at", "0", "--yes"],
                     ["tx", "resolve", data_dir, "tx-1", "commit"],
                     ["demo", "--data-dir", data_dir],
                     ["server", "--data-dir", data_dir, "--port", "0"]):
            check_one_clear_line(argv)
