"""``fmq log repair`` keeps what it cuts (DATA_DIR/repair-<time>/ with a manifest), with
the index and the checkpoint it moves aside, and ``--undo`` puts it all back byte for byte,
crash-ordered (a kill -9 at every file operation of the undo); it checks the directory and
the offset before it asks for confirmation. Real data directories, through click's
CliRunner and child processes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from fmq.cli.main import cli

import fmq
from fmq.admin.repair import MANIFEST_FILE, repair_dirs
from fmq.admin.repair_undo import undo_repair
from fmq.datadir import CHECKPOINT_FILE, INDEX_DATA_FILE, INDEX_DIR, LOCK_FILE, LOG_DIR, UNDO_FILE
from fmq.errors import BadRecord, StorageError
from tests.crashkit import run_child

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
        return sum(len(v) for v in b.reads.all_messages(["t"]).values())


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


# ------------------------------------------------------------ a repair of real damage

def flip_a_byte_of(data_dir: str, body: bytes) -> None:
    """Flip one byte in the middle of the record whose body starts with ``body``."""
    for name in sorted(os.listdir(os.path.join(data_dir, LOG_DIR))):
        path = os.path.join(data_dir, LOG_DIR, name)
        with open(path, "r+b") as f:
            raw = f.read()
            at = raw.find(body)
            if at >= 0:
                f.seek(at + 40)
                f.write(bytes([raw[at + 40] ^ 0x01]))
                return
    raise AssertionError(f"no record with body {body!r}")


def served(data_dir: str) -> dict[tuple[int, int], bytes | str]:
    """What the broker serves of topic ``t``: each (queue, offset)'s body, or "bad" for a
    record it reports as damaged. Opening it fails when recovery refuses the log."""
    answers: dict[tuple[int, int], bytes | str] = {}
    with fmq.Broker.open(data_dir, CFG) as b:
        b.wait_indexed()
        for q in range(b.topics.queue_count("t")):
            low, high = b.reads.queue_range("t", q)
            for offset in range(low, high):
                try:
                    [m] = b.reads.pull("t", q, offset, 1)
                    answers[(q, offset)] = bytes(m.body)
                except BadRecord:
                    answers[(q, offset)] = "bad"
    return answers


def derived_state(data_dir: str) -> dict[str, str | None]:
    """The SHA-256 of the checkpoint and of the index's data file (None: absent)."""
    found: dict[str, str | None] = {}
    for name in (CHECKPOINT_FILE, os.path.join(INDEX_DIR, INDEX_DATA_FILE)):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            with open(path, "rb") as f:
                found[name] = hashlib.sha256(f.read()).hexdigest()
        else:
            found[name] = None
    return found


@pytest.fixture
def damaged(tmp_path):
    """A data dir with one byte flipped mid-segment in message 60, past which the
    checkpoint lies (a clean close), so the broker opens; (dir, the damaged record's log
    offset, what the broker serves)."""
    data_dir = write_data_dir(str(tmp_path / "data"), body_repeat=50, transactions=False)
    flip_a_byte_of(data_dir, b"body-60body-60")
    verified = run("log", "verify", data_dir, "--json", ok=False)
    assert verified.exit_code == 3
    [damage] = json.loads(verified.stdout)["corruption"]
    bad = damage["offset"]
    before = served(data_dir)  # it opens: recovery starts at the checkpoint
    assert list(before.values()).count("bad") == 1 and len(before) == 120
    return data_dir, bad, before


def test_undo_of_a_cut_at_damage_gives_back_a_directory_the_broker_opens(damaged):
    data_dir, bad, before = damaged
    log, derived = log_files(data_dir), derived_state(data_dir)
    assert None not in derived.values()
    run("log", "repair", data_dir, "--cut-at", bad, "--yes")
    assert derived_state(data_dir) == dict.fromkeys(derived)  # moved aside, not deleted
    result = run("log", "repair", data_dir, "--undo", "--yes")
    assert log_files(data_dir) == log  # byte for byte
    assert derived_state(data_dir) == derived  # the index and the checkpoint are back
    assert "index" in result.stdout and "checkpoint" in result.stdout
    assert served(data_dir) == before  # it opens again and serves what it served


def test_undo_after_the_broker_ran_on_the_cut_log_puts_the_old_state_back(damaged):
    data_dir, bad, before = damaged
    log, derived = log_files(data_dir), derived_state(data_dir)
    run("log", "repair", data_dir, "--cut-at", bad, "--yes")
    assert len(served(data_dir)) == 60  # a new index and checkpoint, of the cut log
    run("log", "repair", data_dir, "--undo", "--yes")
    assert (log_files(data_dir), derived_state(data_dir)) == (log, derived)
    assert served(data_dir) == before


def test_a_kill_9_at_any_step_of_an_undo_leaves_a_directory_undone_or_to_finish(
        damaged, tmp_path):
    """SIGKILL before each file operation of the undo in turn, on a fresh copy of the
    repaired directory. Each time the directory is still the repaired one (nothing
    changed), or the restored one, or marked as an undo in progress that the broker
    refuses to open; running the undo again (or the first time) gives back the original
    bytes, and the broker serves what it served before."""
    data_dir, bad, before = damaged
    log, derived = log_files(data_dir), derived_state(data_dir)
    run("log", "repair", data_dir, "--cut-at", bad, "--yes")
    repaired = str(tmp_path / "repaired")
    shutil.copytree(data_dir, repaired)
    cut_log_files = log_files(repaired)
    seen = {"before": 0, "in progress": 0, "after": 0}
    work = str(tmp_path / "work")
    for nth in range(1, 200):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(repaired, work)
        ack = str(tmp_path / f"ack-{nth}")
        child = run_child("undo_crash", work, ack, timeout=120, nth=nth)
        if not child.killed:
            assert child.returncode == 0 and child.acks, child.stderr
            break
        if os.path.exists(os.path.join(work, UNDO_FILE)):
            seen["in progress"] += 1
            with pytest.raises(StorageError, match="--undo"):
                fmq.Broker.open(work, CFG)
            undo_repair(work)  # finishes it
        elif repair_dirs(work):
            seen["before"] += 1
            assert log_files(work) == cut_log_files  # nothing changed yet
            undo_repair(work)
        else:
            seen["after"] += 1
        assert log_files(work) == log, f"killed at operation {nth}"
        assert derived_state(work) == derived, f"killed at operation {nth}"
        assert not os.path.exists(os.path.join(work, UNDO_FILE))
        assert repair_dirs(work) == [] and not any(
            n.startswith("repair-") for n in os.listdir(work))
        if nth % 4 == 1:  # opening is the slow part: every fourth kill is enough
            assert served(work) == before, f"killed at operation {nth}"
    else:
        raise AssertionError("the undo never ended within 200 operations")
    assert nth > 10 and seen["before"] > 0 and seen["in progress"] > 5, seen
    assert log_files(work) == log and derived_state(work) == derived
    assert served(work) == before
