"""Issue 14, item 7: human output is aligned tables with units and dates, never Python
reprs; ``--json`` stays complete."""

from __future__ import annotations

import json
import re
import time

import pytest
from click.testing import CliRunner
from fmq.cli import output as out
from fmq.cli.main import cli

import fmq
from fmq import units
from tests.server.harness import run_cli

from .conftest import FAST

REPR = re.compile(r"\{'|\[\{|\bNone\b")


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


@pytest.fixture
def data_dir(tmp_path):
    path = str(tmp_path / "data")
    with fmq.Broker.open(path, fmq.BrokerConfig(segment_size=16 * 1024, max_message_size=4096,
                                                checkpoint_interval_ms=0)) as b:
        for i in range(40):
            b.send(fmq.Message("t", f"body-{i}".encode() * 10))
        b.prepare([fmq.Message("t", b"open")], "g")
    return path


def test_units():
    assert [units.size(n) for n in (0, 1023, 1024, 1536, 64 * 2**20, 3 * 2**40)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "64.0 MiB", "3.0 TiB"]
    assert units.count(1234567) == "1,234,567" and units.count(None) == "-"
    assert units.date_s(0) == "1970-01-01 00:00:00 UTC"
    assert units.date_ms(86_400_000 + 1500) == "1970-01-02 00:00:01 UTC"
    assert [units.duration_ms(ms) for ms in (5, 12_300, 300_000, 9_000_000, 2 * 86_400_000)] \
        == ["5 ms", "12.3 s", "5.0 min", "2.5 h", "2.0 d"]


def test_table_aligns_columns_and_right_aligns_numbers():
    rows = [{"name": "a", "n": 5, "b": 2048}, {"name": "longer", "n": 12345, "b": None}]
    text = out.table(rows, [("NAME", lambda r: r["name"]), ("N", lambda r: r["n"]),
                            ("SIZE", lambda r: out.size(r["b"]))])
    assert text.splitlines() == [
        "NAME         N     SIZE",
        "a            5  2.0 KiB",
        "longer  12,345        -",
    ]
    assert out.table([], [("X", lambda r: r)], "nothing") == "nothing"


def test_addresses_start_with_a_digit_but_stay_left_aligned():
    rows = [{"at": "127.0.0.1:9876", "lag": 0}, {"at": "127.0.0.1:10", "lag": 4096}]
    text = out.table(rows, [("ADDRESS", lambda r: r["at"]), ("LAG", lambda r: r["lag"])])
    assert text.splitlines() == [
        "ADDRESS           LAG",
        "127.0.0.1:9876      0",
        "127.0.0.1:10    4,096",
    ]


def test_checkpoint_show_prints_a_date_not_epoch_seconds(data_dir):
    text = run("checkpoint", "show", data_dir)
    data = json.loads(run("checkpoint", "show", data_dir, "--json"))
    assert str(data["written_at"]) not in text
    assert units.date_s(data["written_at"]) in text
    assert re.search(r"^recovery offset\s+[\d,]+ \(replay starts here\)$", text, re.M)
    assert abs(data["written_at"] - time.time()) < 3600  # --json keeps the raw value


def test_log_verify_prints_a_table_of_record_types(data_dir):
    result = CliRunner().invoke(cli, ["log", "verify", data_dir])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert not REPR.search(text), text
    assert re.search(r"^TYPE\s+RECORDS$", text, re.M)
    assert re.search(r"^MESSAGE\s+40$", text, re.M) and re.search(r"^PREPARE\s+1$", text, re.M)
    assert re.search(r"^records\s+\d+$", text, re.M) and text.rstrip().endswith("OK")
    full = json.loads(CliRunner().invoke(cli, ["log", "verify", data_dir, "--json"]).stdout)
    assert full["records"]["MESSAGE"] == 40


def test_consume_line_leaves_out_absent_key_and_tags(start_server):
    srv = start_server(FAST)
    run_cli("produce", "--server", srv.address, "--topic", "t", "--body", "plain")
    run_cli("produce", "--server", srv.address, "--topic", "t", "--body", "labelled",
            "--key", "k1", "--tags", "red")
    got = run_cli("consume", "--server", srv.address, "--topic", "t", "--group", "g",
                  "--max", "2", "--idle-timeout", "3", timeout=60)
    assert got.returncode == 0, got.stderr
    lines = sorted(got.stdout.splitlines(), key=lambda line: line.endswith("plain"))
    assert re.fullmatch(r"t/\d@\d+ key=k1 tags=red: labelled", lines[0]), lines
    assert re.fullmatch(r"t/\d@\d+: plain", lines[1]), lines
    assert "None" not in got.stdout
