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
        b.transactions.prepare([fmq.Message("t", b"open")], "g")
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
    stored = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    assert re.fullmatch(rf"t/\d@\d+ {stored} key=k1 tags=red: labelled", lines[0]), lines
    assert re.fullmatch(rf"t/\d@\d+ {stored}: plain", lines[1]), lines
    assert "None" not in got.stdout


# Every command's human output, checked by one rule set: no Python reprs, no epoch
# milliseconds, no raw byte counts, no "1 messages".
EPOCH_MS = re.compile(r"(?<![\w.-])1[6-9]\d{11}(?![\w.-])")  # tx ids embed one: not alone
RAW_BYTES = re.compile(r"\b\d{4,} bytes\b")
ONE_PLURAL = re.compile(r"(?<![\d,.])1 (messages|segments|segment files|members|queues|records|"
                        r"transactions|open transactions|entries|queue entries|letters|"
                        r"dead letters|connections|processes|check-backs|flushes|duplicates|"
                        r"producers|reads|files)\b")
HUMAN_REPR = re.compile(r"\{'|\[\{|\['|\bNone\b|\bTrue\b|\bFalse\b")


def assert_human(what: str, text: str) -> None:
    for name, pattern in (("a Python repr", HUMAN_REPR), ("epoch milliseconds", EPOCH_MS),
                          ("a raw byte count", RAW_BYTES), ("a wrong plural", ONE_PLURAL)):
        found = pattern.search(text)
        assert not found, f"{what} prints {name} ({found.group(0)!r}):\n{text}"


def cli_text(*args: str, ok: bool = True) -> str:
    result = run_cli(*args, timeout=90)
    assert (result.returncode == 0) == ok, (args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout + result.stderr


def test_every_offline_command_prints_human_values(data_dir, tmp_path):
    config = tmp_path / "fmq.json"
    config.write_text(json.dumps({"segment_size": "16MiB", "retention_ms": "2h",
                                  "server": {"max_frame_size": "8MiB"}}))
    shown = cli_text("config", "show", "--config", str(config))
    assert re.search(r"^broker segment_size\s+16\.0 MiB\s+\(config file", shown, re.M), shown
    assert re.search(r"^broker retention_ms\s+2\.0 h\s", shown, re.M), shown
    assert re.search(r"^server max_frame_size\s+8\.0 MiB\s", shown, re.M), shown
    assert re.search(r"^server port\s+9876\s", shown, re.M), shown  # a port stays a number
    assert "16777216" not in shown
    assert_human("config show", shown)
    dumped = cli_text("log", "dump", data_dir, "--limit", "3")
    assert re.search(r"store_time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", dumped), dumped
    for args in (("log", "verify", data_dir), ("log", "dump", data_dir),
                 ("checkpoint", "show", data_dir), ("tx", "list", data_dir),
                 ("index", "rebuild", data_dir), ("user", "list", data_dir),
                 ("acl", "list", data_dir), ("demo",)):
        assert_human(" ".join(args[:2]), cli_text(*args))
    rebuilt = cli_text("index", "rebuild", data_dir)
    assert re.search(r"\(\d+(\.\d)? (B|KiB|MiB)\)", rebuilt) and "1 open transaction," in rebuilt


def test_every_network_command_prints_human_values(start_server):
    from tests.server.test_scheduled_and_retries import FAST_RETRIES, _wait_for_dead_letter

    srv = start_server(FAST_RETRIES)
    at = ("--server", srv.address)
    texts = {
        "produce": cli_text("produce", *at, "--topic", "orders", "--body", "bad",
                            "--key", "o-1"),
        "produce --tx": cli_text("produce", *at, "--topic", "orders", "--body", "t",
                                 "--tx", "commit"),
        "produce --deliver-at": cli_text("produce", *at, "--topic", "later", "--body", "x",
                                         "--deliver-at", "2027-01-01"),
    }
    assert "(1 message)" in texts["produce --tx"]
    assert "at 2027-01-01 00:00:00 UTC" in texts["produce --deliver-at"]
    texts["consume"] = cli_text("consume", *at, "--topic", "orders", "--group", "audit",
                                "--max", "1", "--idle-timeout", "5")
    assert "consumed 1 message\n" in texts["consume"]
    # A dead letter of group shop: its handler always fails (retry delays are short).
    with fmq.client.Consumer(srv.address, "shop", "orders") as c:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in c.poll(0.3):
                if m.body == b"bad":  # only this one: exactly one dead letter
                    c.nack(m, delay=0.05)
            if json_lines_of(cli_text("dlq", "list", "shop", *at, "--json")):
                break
    _wait_for_dead_letter(srv.address, "shop")
    with fmq.client.Consumer(srv.address, "one", "orders", start="earliest") as live:
        deadline = time.monotonic() + 30  # joined once the server lists it as a member
        while time.monotonic() < deadline:
            live.poll(0.2)
            joined = json_lines_of(cli_text("groups", *at, "--json"))
            if any(g["group"] == "one" and g["members"] for g in joined):
                break
        texts["groups"] = cli_text("groups", *at)
        texts["stats"] = cli_text("stats", *at)
    assert re.search(r"group one: 1 member \(generation \d+\): \S+ \(\d+ queues?\)",
                     texts["groups"]), texts["groups"]
    listed = json_lines_of(cli_text("dlq", "list", "shop", *at, "--json"))
    dead = listed[0]
    texts["dlq show"] = cli_text("dlq", "show", "shop", str(dead["queue_id"]),
                                 str(dead["queue_offset"]), *at)
    assert re.search(r"^stored\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$", texts["dlq show"], re.M)
    assert re.search(r"^tags\s+-$", texts["dlq show"], re.M), texts["dlq show"]
    for args in (("topics",), ("groups", "audit"), ("dlq", "list", "shop"),
                 ("groups", "reset-offsets", "audit", "--to-earliest"),
                 ("tx", "list"), ("replica", "status"), ("dlq", "redrive", "shop"),
                 ("bench", "produce", "--topic", "b", "--producers", "1", "--processes", "1",
                  "--duration", "1")):
        texts[" ".join(args)] = cli_text(*args, *at)
    [bench] = [text for what, text in texts.items() if what.startswith("bench")]
    assert "1 connection in 1 process " in bench, bench
    assert "redrove 1 dead letter of group shop" in texts["dlq redrive shop"]
    texts["fmq server: listening"] = next(line for line in srv.log().splitlines()
                                          if "listening on" in line)
    assert "max frame 64.0 MiB" in texts["fmq server: listening"]
    for what, text in texts.items():
        assert_human(what, text)


def json_lines_of(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_a_bench_report_with_errors_names_them_without_a_python_dict():
    from fmq.loadgen.report import BenchReport

    report = BenchReport(
        kind="produce", producers=2, processes=1, size=1024, pipeline=8, batch=1,
        duration_s=1.0, elapsed_s=1.0, messages=10, operations=10, bytes=10_240, p50_ms=1.0,
        p99_ms=2.0, p999_ms=3.0, max_ms=4.0, errors={"ServerBusy": 2, "TimedOut": 1},
        first_error="server busy", server_cpu_us_per_msg=None, client_cpu_pct=50.0,
        loop="asyncio", count_check="ok", broker_count=None, server="127.0.0.1:9876")
    text = report.text()
    assert "(ServerBusy 2, TimedOut 1; first: server busy)" in text, text
    assert "2 connections in 1 process " in text and "1,024 B bodies" in text
    assert_human("bench report", text)


def test_the_spark_rebuild_summary_counts_in_the_right_number():
    from fmq.spark.summary import summary_text

    result = {"torn_tail": None, "checkpoint": {"recovery_offset": 0, "log_end": 92},
              "parquet": {}, "phase_seconds": {"scan": 1.0}, "data_dir": "d", "index_dir": "i",
              "spark_version": "4.0", "master": "local[2]", "segments": 1, "log_start": 0,
              "log_end": 92, "log_bytes": 92, "records": 1, "queue_entries": 1, "queues": 1,
              "queues_carried_over": 0, "queue_floors_applied": 0, "key_entries": 0,
              "consumer_offsets": 0, "consumer_offsets_from_log": True,
              "open_transactions": []}
    text = summary_text(result)
    assert "1 segment, offsets 0 .. 92 (92 B)" in text and "1 in 1 queue (" in text, text
    assert_human("index rebuild --spark", text)
