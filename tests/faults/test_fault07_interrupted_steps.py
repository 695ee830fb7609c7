"""Fault 7: segment roll, checkpoint replace, retention deletion and recovery itself, each
interrupted at every step.

Each scenario prepares a data dir, then runs one step in a child armed to be SIGKILLed at
operation N (any write, temp-file write, fsync, fdatasync, rename, directory fsync,
unlink), for N = 1, 2, ... until the step completes. After each kill:

* **roll**: the send that does not fit seals segment 0 (filler) and creates segment 1
  (zero-fill, fsync, rename, directory fsync); then I1, I2 (prefix of the uninterrupted
  run), I3, I6;
* **checkpoint**: the checkpoint file is the old one or the new one, never missing or
  torn (temp file, fsync, rename, directory fsync), and recovery is correct;
* **retention**: deletion of the oldest segments (checkpoint, unlinks, directory fsync):
  the log still starts at a segment boundary with no hole, nothing acknowledged that
  retention did not delete is lost, and no index entry points into a deleted segment;
* **recovery**: a crashed dir that needs a torn tail cut *and* a committing transaction
  rolled forward; recovery is killed at every step, recovered again, and must end in the
  same state as one uninterrupted recovery (I5).
"""

from __future__ import annotations

import os
import shutil

import pytest

from fmq.recovery.checkpoint import read_checkpoint
from tests.crashkit import read_acks, run_child
from tests.faults.invariants import (
    compare_states,
    log_records,
    open_broker,
    record_key,
    state_of,
    verify_recovery,
)
from tests.faults.workload import (
    ack_path,
    config_kwargs,
    copy_dir,
    make_config,
    msg,
    run_plan,
    small_plan,
)

CONFIG = config_kwargs()
ARM_ANY = {"op": "any", "mode": "before", "segments_only": False, "include_tmp": True}


def _prepared(tmp_path, plan, config=CONFIG) -> tuple[str, list[dict]]:
    base = str(tmp_path / "prepared")
    path = ack_path("prep")
    res = run_plan(base, path, plan, config)
    assert res.returncode == 0, res.stderr[-3000:]
    acks = [a for a in read_acks(path) if a["op"] not in ("opened", "done", "closed")]
    return base, acks


def _interrupt_every_step(tmp_path, base: str, step_plan: list[dict], config: dict,
                          check) -> int:
    """Run ``step_plan`` on copies of ``base``, killed at operation 1, 2, ...; ``check(data,
    acks)`` after each kill. Returns the number of interruptions."""
    n = 0
    while True:
        n += 1
        data = copy_dir(base, str(tmp_path / "data"))
        path = ack_path(f"step-{n}")
        res = run_plan(data, path, step_plan, config, arm=dict(ARM_ANY, nth=n), close=False)
        acks = [a for a in read_acks(path) if a["op"] not in ("opened", "done", "closed")]
        if res.returncode == 0:
            return n - 1
        assert res.killed, f"step killed at op {n}: the child failed:\n{res.stderr[-3000:]}"
        try:
            check(data, acks)
        except AssertionError as exc:
            raise AssertionError(f"interrupted at operation {n}: {exc}") from exc


def _reference(tmp_path, base: str, step_plan: list[dict], config: dict) -> list[tuple]:
    data = copy_dir(base, str(tmp_path / "reference"))
    res = run_plan(data, ack_path("ref"), step_plan, config)
    assert res.returncode == 0, res.stderr[-3000:]
    keys = [record_key(r) for r in log_records(data)]
    shutil.rmtree(data)
    return keys


def test_segment_roll_interrupted_at_every_step(tmp_path):
    plan = [{"op": "send", "msgs": [msg(f"a{i}", 3000)]} for i in range(5)]
    base, acks = _prepared(tmp_path, plan)
    step = [{"op": "send", "msgs": [msg("roller", 1500)]}]
    keys = _reference(tmp_path, base, step, CONFIG)
    assert any(k[0] == "FILLER" for k in keys), "the step did not roll the segment"
    config = make_config(CONFIG)

    def check(data, step_acks):
        verify_recovery(data, plan + step, acks + step_acks, config, str(tmp_path), keys)

    n = _interrupt_every_step(tmp_path, base, step, CONFIG, check)
    assert n >= 6
    print(f"fault 7 (roll): {n} interruptions")


def test_checkpoint_replace_interrupted_at_every_step(tmp_path):
    plan = small_plan()[:7]
    base, acks = _prepared(tmp_path, plan)
    old = read_checkpoint(os.path.join(base, "checkpoint"))
    step = small_plan()[8:11] + [{"op": "checkpoint"}]
    keys = _reference(tmp_path, base, step, CONFIG)
    config = make_config(CONFIG)
    new_offsets = set()

    def check(data, step_acks):
        cp = read_checkpoint(os.path.join(data, "checkpoint"))  # raises when torn
        assert cp is not None, "the checkpoint file is missing"
        if cp != old:
            new_offsets.add(cp.recovery_offset)
        verify_recovery(data, plan + step, acks + step_acks, config, str(tmp_path), keys)

    n = _interrupt_every_step(tmp_path, base, step, CONFIG, check)
    assert new_offsets, "no interruption ever saw the new checkpoint"
    print(f"fault 7 (checkpoint): {n} interruptions")


def test_retention_interrupted_at_every_step(tmp_path):
    cfg = config_kwargs(retention_bytes=40 * 1024)
    plan = [{"op": "send", "msgs": [msg(f"r{i}", 2500, ("orders", "pay")[i % 2], key="kr")]}
            for i in range(40)]
    base, acks = _prepared(tmp_path, plan, cfg)
    step = [{"op": "retention"}]
    config = make_config(cfg)
    segs_before = sorted(os.listdir(os.path.join(base, "log")))
    deleted_seen = []

    def check(data, step_acks):
        records = log_records(data)
        segs = sorted(os.listdir(os.path.join(data, "log")))
        assert segs == segs_before[len(segs_before) - len(segs):], \
            f"retention left a hole: {segs}"
        deleted_seen.append(len(segs_before) - len(segs))
        assert records[0].log_offset == int(segs[0].split(".")[0])
        verify_recovery(data, plan + step, acks + step_acks, config, str(tmp_path),
                        retention=True)

    n = _interrupt_every_step(tmp_path, base, step, cfg, check)
    assert max(deleted_seen) >= 2, "retention deleted too little to interrupt it in between"
    print(f"fault 7 (retention): {n} interruptions, up to {max(deleted_seen)} segments deleted")


@pytest.mark.parametrize("index", ["kept", "deleted"])
def test_recovery_interrupted_at_every_step(tmp_path, index):
    plan = small_plan()
    commit_tx3 = next(i for i, op in enumerate(plan) if op == {"op": "commit", "tx": "tx3"})
    base, _acks = _prepared(tmp_path, plan[:commit_tx3])
    # the commit of tx3 dies after its first TX_MESSAGE and 40 bytes of the next one:
    # a committing transaction and a torn tail
    res = run_plan(base, ack_path("crash"), plan[commit_tx3:], CONFIG,
                   arm={"op": "pwrite", "nth": 1, "mode": "records", "records": 1,
                        "extra": 40})
    assert res.killed, res.stderr[-3000:]
    if index == "deleted":
        shutil.rmtree(os.path.join(base, "index"))
    ref = copy_dir(base, str(tmp_path / "ref"))
    b = open_broker(ref, make_config(CONFIG))
    try:
        assert b.recovery.rolled_forward == ["tx3"] and b.recovery.torn_tail
        expected = state_of(b, ref)
    finally:
        b.close()
    config = make_config(CONFIG)
    n = 0
    while True:
        n += 1
        data = copy_dir(base, str(tmp_path / "data"))
        res = run_child("armed_recovery", data, ack_path(f"rec-{n}"), config=CONFIG,
                        arm=dict(ARM_ANY, nth=n))
        if res.returncode == 0:
            break
        assert res.killed, f"recovery killed at op {n}: {res.stderr[-3000:]}"
        b = open_broker(data, config)
        try:
            compare_states(expected, state_of(b, data),
                           f"recovery interrupted at operation {n}, then run again")
        finally:
            b.close()
    assert n > 4, "recovery did too few operations to interrupt"
    print(f"fault 7 (recovery, index {index}): {n - 1} interruptions")
