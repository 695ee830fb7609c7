"""``fmq log repair`` keeps what it cuts (DATA_DIR/repair-<time>/ with a manifest) and
``--undo`` puts it back byte for byte; it checks the directory and the offset before it
asks for confirmation. Real data directories, through click's CliRunner."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from fmq.cli.main import cli

import fmq
from fmq.admin.repair import MANIFEST_FILE, repair_dirs
from fmq.datadir import LOCK_FILE, LOG_DIR

from .conftest import CFG, write_data_dir


@pytest.fixture
def data_dir(tmp_path):
    """Messages only, with larger bodies: the cuts land in the middle of the log."""
    return write_data_dir(str(tmp_path / "data"), body_repeat=50, transactions=False)


def run(*args, ok=True, stdin=None):
    result = CliRunner().invoke(cli, [str(a) for a in args], input=stdin)
    if ok:
        assert result.exit_code == 0, (result.output, result.stderr, result.exception)
    return result


def log_files(data_dir: str) -> dict[str, str]:
    log_dir = os.path.join(data_dir, LOG_DIR)
    digests = {}
    for name in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, name), "rb") as f:
            digests[name] = hashlib.sha256(f.read()).hexdigest()
    return digests


def message_offsets(data_dir: str) -> list[int]:
    lines = run("log", "dump", data_dir, "--json").stdout.splitlines()
    return [json.loads(x)["offset"] for x in lines]


def count_messages(data_dir: str) -> int:
    with fmq.Broker.open(data_dir, CFG) as b:
        b.wait_indexed()
        return sum(len(v) for v in b.all_messages(["t"]).values())


def test_a_repair_keeps_the_cut_bytes_and_undo_puts_them_back(data_dir):
    before = log_files(data_dir)
    assert len(before) >= 3, "the cut must fall in an early segment of several"
    cut = message_offsets(data_dir)[30]
    result = run("log", "repair", data_dir, "--cut-at", cut, "--yes")
    [kept] = repair_dirs(data_dir)
    assert kept in result.stdout and "--undo" in result.stdout
    with open(os.path.join(kept, MANIFEST_FILE)) as f:
        manifest = json.load(f)
    assert manifest["cut_at"] == cut and manifest["log_end_after"] == cut
    assert {e["kept"] for e in manifest["files"]} == {"tail", "moved"}
    assert log_files(data_dir) != before
    assert count_messages(data_dir) == 30  # opened (and closed) once on the cut log

    result = run("log", "repair", data_dir, "--undo", "--yes")
    assert "put back" in result.stdout
    assert log_files(data_dir) == before  # the original bytes, every segment
    assert repair_dirs(data_dir) == []
    assert count_messages(data_dir) == 120


def test_undo_is_refused_once_records_were_written_after_the_cut(data_dir):
    cut = message_offsets(data_dir)[60]
    run("log", "repair", data_dir, "--cut-at", cut, "--yes")
    with fmq.Broker.open(data_dir, CFG) as b:
        b.send(fmq.Message("t", b"written after the repair"))
    after_write = log_files(data_dir)
    result = run("log", "repair", data_dir, "--undo", "--yes", ok=False)
    assert result.exit_code == 1 and "written since" in result.stderr
    assert log_files(data_dir) == after_write and len(repair_dirs(data_dir)) == 1


def test_undo_without_a_repair_says_so(data_dir):
    result = run("log", "repair", data_dir, "--undo", "--yes", ok=False)
    assert result.exit_code == 1 and "no repair to undo" in result.stderr


def test_a_bad_offset_is_refused_before_any_question(data_dir):
    before = log_files(data_dir)
    cut = message_offsets(data_dir)[10]
    result = run("log", "repair", data_dir, "--cut-at", cut + 1, ok=False, stdin="n\n")
    assert result.exit_code == 1 and "not the offset of a record" in result.stderr
    assert "[y/N]" not in result.output  # no question was asked
    assert log_files(data_dir) == before


def test_a_live_directory_is_refused_before_any_question(data_dir):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({os.path.join(data_dir, LOCK_FILE)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        result = run("log", "repair", data_dir, "--cut-at", 0, ok=False, stdin="n\n")
        assert result.exit_code == 1 and "in use" in result.stderr
        assert "[y/N]" not in result.output
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert repair_dirs(data_dir) == []


def test_cut_at_and_undo_are_exclusive(data_dir):
    result = run("log", "repair", data_dir, ok=False)
    assert result.exit_code == 2 and "--cut-at" in result.stderr
    result = run("log", "repair", data_dir, "--cut-at", 0, "--undo", ok=False)
    assert result.exit_code == 2
