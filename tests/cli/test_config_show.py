"""``fmq config show``: every setting with its value and where it came from."""

from __future__ import annotations

import json

from click.testing import CliRunner
from fmq.cli.main import cli


def rows(*args, env=None):
    result = CliRunner().invoke(cli, ["config", "show", "--json", *args], env=env)
    assert result.exit_code == 0, (result.output, result.exception)
    return {(r["section"], r["key"]): r for r in map(json.loads, result.stdout.splitlines())}


def test_defaults_only():
    shown = rows()
    assert shown[("broker", "segment_size")] == {
        "section": "broker", "key": "segment_size", "value": 64 << 20, "source": "default"}
    assert shown[("server", "port")]["value"] == 9876
    assert {r["source"] for r in shown.values()} == {"default"}


def test_file_command_line_and_environment_are_named(tmp_path):
    path = tmp_path / "fmq.toml"
    path.write_text('tx_check_after_ms = "3s"\n[server]\nport = 7000\nmax_connections = 9\n')
    shown = rows("--config", str(path), "--port", "7100", env={"FMQ_SERVER_HOST": "0.0.0.0"})
    assert shown[("broker", "tx_check_after_ms")]["value"] == 3000
    assert shown[("broker", "tx_check_after_ms")]["source"] == f"config file {path}"
    assert shown[("server", "max_connections")]["source"] == f"config file {path}"
    assert shown[("server", "port")]["value"] == 7100
    assert shown[("server", "port")]["source"] == "command line --port"
    assert shown[("server", "host")]["value"] == "0.0.0.0"
    assert shown[("server", "host")]["source"] == "environment FMQ_SERVER_HOST"
    assert shown[("broker", "queues_per_topic")]["source"] == "default"


def test_human_output_has_one_line_per_setting(tmp_path):
    result = CliRunner().invoke(cli, ["config", "show"])
    lines = result.stdout.splitlines()
    assert result.exit_code == 0 and len(lines) == len(rows())
    assert any(line.split()[:2] == ["broker", "dispatch_max_pending"] for line in lines)


def test_a_bad_file_is_one_clear_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"segment_size": "64 parsecs"}')
    result = CliRunner().invoke(cli, ["config", "show", "--config", str(path)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert result.stderr.strip().splitlines() == [
        f"error: broker config in {path}: segment_size must be a size in bytes: an integer or "
        'a string with a unit (B, KiB, MiB, GiB, TiB; KB, MB, GB, TB are powers of 1000), '
        'e.g. 67108864 or "64MiB", not \'64 parsecs\'']


def test_a_zero_that_is_a_rule_says_the_rule():
    result = CliRunner().invoke(cli, ["config", "show"])
    lines = {tuple(line.split()[:2]): line for line in result.stdout.splitlines()}
    # "0 ms" of a retention would read as "deleted at once": 0 keeps everything.
    assert "0 (keep forever)" in lines[("broker", "retention_ms")]
    assert "0 (no limit)" in lines[("broker", "retention_bytes")]
    assert "0 ms" not in lines[("broker", "retention_ms")]
    assert "1.0 min" in lines[("broker", "retention_interval_ms")]  # not zero: an amount
