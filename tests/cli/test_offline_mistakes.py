"""Offline tools on the usual mistakes: offsets that are not record starts, directories that
are not FMQ data directories, a missing optional extra."""

from __future__ import annotations

import json
import os
import sys

import pytest
from click.testing import CliRunner
from fmq.cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def offsets(data_dir):
    out = run("log", "dump", data_dir, "--json").stdout
    return [json.loads(line)["offset"] for line in out.splitlines()]


def test_dump_from_inside_a_record_names_the_nearest_starts(data_dir):
    starts = offsets(data_dir)
    inside = starts[5] + 5
    result = run("log", "dump", data_dir, "--from", inside)
    assert result.exit_code == 1
    assert (f"{inside} is not a record start (the nearest are {starts[5]} and {starts[6]})"
            in result.stderr)
    assert "repair" not in result.stderr and "corrupt" not in result.stderr.lower()


def test_dump_from_past_the_end_says_where_the_log_ends(data_dir):
    end = json.loads(run("log", "verify", data_dir, "--json").stdout)["end_offset"]
    result = run("log", "dump", data_dir, "--from", end + 1000)
    assert result.exit_code == 1
    assert f"{end + 1000} is past the end of the log (ends at {end})" in result.stderr
    assert "repair" not in result.stderr


def test_dump_from_a_record_start_in_a_later_segment(data_dir):
    starts = offsets(data_dir)
    later = starts[-3]
    assert later > 16 * 1024  # the fixture's log spans several segments
    lines = run("log", "dump", data_dir, "--from", later, "--json").stdout.splitlines()
    assert [json.loads(x)["offset"] for x in lines] == starts[-3:]


@pytest.mark.parametrize("command", [
    ("index", "rebuild"), ("tx", "list"), ("checkpoint", "show"), ("log", "verify"),
    ("log", "dump"), ("log", "repair", "--cut-at", "0", "--yes"),
])
def test_offline_tools_refuse_a_directory_that_is_not_a_data_dir(tmp_path, command):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run(*command[:2], empty, *command[2:])
    assert result.exit_code == 1, result.output
    assert "is not an FMQ data directory" in result.stderr
    assert os.listdir(empty) == []  # nothing created there


def test_tx_resolve_refuses_an_empty_directory_and_creates_nothing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run("tx", "resolve", empty, "tx-1", "commit")
    assert result.exit_code == 1 and "is not an FMQ data directory" in result.stderr
    assert os.listdir(empty) == []


def test_a_system_directory_is_not_an_empty_broker():
    for command in (("checkpoint", "show"), ("tx", "list")):
        result = run(*command, "/etc")
        assert result.exit_code == 1 and "/etc is not an FMQ data directory" in result.stderr


def test_data_dir_is_accepted_as_an_option_too(data_dir):
    by_option = run("tx", "list", "--data-dir", data_dir, "--json")
    assert by_option.exit_code == 0, by_option.output
    assert json.loads(by_option.stdout)["tx_id"] == "tx-open"
    assert run("checkpoint", "show", "--data-dir", data_dir).exit_code == 0
    result = run("tx", "resolve", "--data-dir", data_dir, "tx-open", "rollback", "--json")
    assert json.loads(result.stdout) == {"tx_id": "tx-open", "state": "rollback"}
    both = run("log", "verify", data_dir, "--data-dir", os.path.dirname(data_dir))
    assert both.exit_code == 2 and "two data directories" in both.stderr


def test_index_rebuild_with_spark_but_without_the_extra_says_what_to_install(
        data_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as when pyarrow is not installed
    result = run("index", "rebuild", data_dir, "--spark")
    assert result.exit_code == 1
    assert "pip install 'fmq[spark]'" in result.stderr and "Traceback" not in result.output


def test_master_without_spark_is_a_usage_error(data_dir):
    result = run("index", "rebuild", data_dir, "--master", "local[2]")
    assert result.exit_code == 2 and "--master needs --spark" in result.stderr


def test_dump_from_a_damaged_offset_names_the_damage(data_dir):
    from fmq.datadir import LOG_DIR, format_segment_name

    starts = offsets(data_dir)
    with open(os.path.join(data_dir, LOG_DIR, format_segment_name(0)), "r+b") as f:
        f.seek(starts[3] + 20)  # inside the fourth record: its CRC no longer matches
        f.write(b"\xff\xff\xff\xff")
    damage = json.loads(run("log", "verify", data_dir, "--json").stdout)["corruption"][0]
    result = run("log", "dump", data_dir, "--from", damage["offset"])
    assert result.exit_code == 1 and "corrupt record" in result.stderr
    assert "not a record start" not in result.stderr


def test_a_broker_dir_without_segments_yet_is_still_a_data_dir(tmp_path):
    """A broker that stopped before its first segment leaves LOCK and an empty log/."""
    data_dir = tmp_path / "data"
    (data_dir / "log").mkdir(parents=True)
    (data_dir / "LOCK").touch()
    result = run("tx", "list", data_dir, "--json")
    assert result.exit_code == 0 and result.stdout == ""
    assert run("index", "rebuild", data_dir).exit_code == 0
