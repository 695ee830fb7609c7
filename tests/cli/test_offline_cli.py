"""The offline commands, through click's CliRunner, on real data directories."""

from __future__ import annotations

import json
import os
import shutil

from click.testing import CliRunner
from fmq.cli.main import cli

import fmq
from fmq.datadir import CHECKPOINT_FILE, INDEX_DIR, LOG_DIR, format_segment_name

from .conftest import CFG


def run(*args, ok=True):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, (result.output, result.stderr, result.exception)
    return result


def test_help_lists_the_command_groups():
    out = run("--help").stdout
    for group in ("log", "checkpoint", "index", "tx"):
        assert group in out


def test_log_verify_clean_and_json(data_dir):
    out = run("log", "verify", data_dir, "--json").stdout
    report = json.loads(out)
    assert report["ok"] and report["records"]["MESSAGE"] == 120
    assert report["records"]["PREPARE"] == 2 and report["records"]["COMMIT"] == 1
    assert "OK" in run("log", "verify", data_dir).stdout


def test_log_verify_names_corruption_and_fails(data_dir):
    seg0 = os.path.join(data_dir, LOG_DIR, format_segment_name(0))
    with open(seg0, "r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    result = run("log", "verify", data_dir, "--json", ok=False)
    assert result.exit_code == 3
    report = json.loads(result.stdout)
    [damage] = report["corruption"]
    assert damage["segment"] == format_segment_name(0) and damage["offset"] <= 1000


def test_log_dump_json_lines(data_dir):
    lines = run("log", "dump", data_dir, "--json", "--limit", "5").stdout.splitlines()
    records = [json.loads(x) for x in lines]
    assert len(records) == 5 and records[0]["offset"] == 0 and records[0]["type"] == "MESSAGE"
    nxt = records[1]["offset"]
    again = json.loads(run("log", "dump", data_dir, "--json", "--from", nxt, "--limit", "1")
                       .stdout)
    assert again == records[1]
    text = run("log", "dump", data_dir, "--limit", "1", "--body").stdout
    assert "MESSAGE" in text and "body-0" in text


def test_log_dump_from_a_bad_offset_is_a_clear_error(data_dir):
    result = run("log", "dump", data_dir, "--from", "3", ok=False)
    assert result.exit_code == 1 and "error:" in result.stderr


def test_checkpoint_show(data_dir):
    cp = json.loads(run("checkpoint", "show", data_dir, "--json").stdout)
    open_tx = json.loads(run("tx", "list", data_dir, "--json").stdout)
    assert cp["recovery_offset"] == open_tx["prepare_offset"] < cp["applied_offset"]
    os.unlink(os.path.join(data_dir, CHECKPOINT_FILE))
    assert "no checkpoint" in run("checkpoint", "show", data_dir).stdout


def test_index_rebuild(data_dir):
    with fmq.Broker.open(data_dir, CFG) as b:
        before = b._index.dump()
    shutil.rmtree(os.path.join(data_dir, INDEX_DIR))
    report = json.loads(run("index", "rebuild", data_dir, "--json").stdout)
    assert report["records_replayed"] >= 120 and report["open_transactions"] == 1
    with fmq.Broker.open(data_dir, CFG) as b:
        assert b._index.dump() == before


def test_tx_list_and_resolve_offline(data_dir):
    [t] = [json.loads(x) for x in run("tx", "list", data_dir, "--json").stdout.splitlines()]
    assert (t["tx_id"], t["messages"], t["state"]) == ("tx-open", 1, "open")
    assert "tx-open" in run("tx", "list", data_dir).stdout
    out = json.loads(run("tx", "resolve", data_dir, "tx-open", "rollback", "--json").stdout)
    assert out == {"tx_id": "tx-open", "state": "rollback"}
    assert run("tx", "list", data_dir, "--json").stdout == ""
    result = run("tx", "resolve", data_dir, "tx-open", "commit", ok=False)
    assert result.exit_code == 1 and "already ended with rollback" in result.stderr


def test_tx_resolve_refuses_a_running_broker(data_dir):
    with fmq.Broker.open(data_dir, CFG):
        result = run("tx", "resolve", data_dir, "tx-open", "commit", ok=False)
    assert result.exit_code == 1 and "in use by another FMQ process" in result.stderr


def test_log_repair_cuts_explicitly(data_dir):
    lines = run("log", "dump", data_dir, "--json").stdout.splitlines()
    records = [json.loads(x) for x in lines]
    cut = records[50]["offset"]
    result = run("log", "repair", data_dir, "--cut-at", cut + 1, "--yes", ok=False)
    assert result.exit_code == 1 and "not the offset of a record" in result.stderr
    run("log", "repair", data_dir, "--cut-at", cut, "--yes")
    with fmq.Broker.open(data_dir, CFG) as b:
        b.wait_indexed()
        total = sum(len(v) for v in b.reads.all_messages(["t"]).values())
        assert total == sum(1 for r in records[:50] if r["type"] == "MESSAGE")


def test_missing_data_dir_is_a_usage_error(tmp_path):
    result = run("log", "verify", tmp_path / "nope", ok=False)
    assert result.exit_code == 2
