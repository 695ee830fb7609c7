"""Fault 3: crash points enumerated.

A child runs :func:`tests.faults.workload.small_plan` (plain sends, transactions committed,
rolled back and left open, a commit whose PRE_MESSAGEs lie in an older segment, two
checkpoints, a segment roll, the clean close) with CrashingIO armed on operation ``any``:
it is SIGKILLed at the N-th write, fdatasync, fsync, rename, directory fsync or unlink
(temp-file writes counted too), for N = 1, 2, ... until the workload completes. After each
crash: I1, I2 (against the uncrashed reference run), I3, I5 (recover twice; append, crash
and recover again) and I6.

Mode ``before`` dies before the operation; ``torn`` writes half of a pwrite's buffer (the
page cache keeps a torn batch) and dies.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.crashkit import read_acks
from tests.faults.invariants import InvariantViolation, reference_run, verify_crash
from tests.faults.workload import ack_path, config_kwargs, run_plan, small_plan

PLAN = small_plan()
CONFIG = config_kwargs()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return reference_run(str(tmp_path_factory.mktemp("ref")), PLAN, CONFIG)


def _crash_at(tmp_path, reference, n: int, mode: str, **checks) -> bool:
    """Crash the workload at operation ``n``; False when it completed without crashing."""
    keys, _ops = reference
    data = str(tmp_path / "data")
    shutil.rmtree(data, ignore_errors=True)
    path = ack_path(f"crash-{n}")
    res = run_plan(data, path, PLAN, CONFIG,
                   arm={"op": "any", "nth": n, "mode": mode, "segments_only": False,
                        "include_tmp": True})
    acks = read_acks(path)
    if res.returncode == 0:
        assert acks[-1]["op"] == "closed"
        return False
    assert res.killed, f"crash point {n}: the child failed instead of crashing:\n{res.stderr[-3000:]}"
    try:
        verify_crash(data, PLAN, acks, CONFIG, str(tmp_path), keys, **checks)
    except AssertionError as exc:
        raise AssertionError(f"crash point {n} ({mode}): {exc}") from exc
    return True


@pytest.mark.parametrize("mode", ["before", "torn"])
def test_every_crash_point_of_the_small_workload(tmp_path, reference, mode):
    _keys, total = reference
    crashed = 0
    for n in range(1, total + 2):
        if not _crash_at(tmp_path, reference, n, mode,
                         twice=True, append_after=(n % 3 == 0 or mode == "torn")):
            break
        crashed += 1
    # every counted operation was a crash point, and one past the last completes
    assert crashed == total, f"{crashed} crash points, the reference run counted {total}"
    print(f"fault 3 ({mode}): {crashed} crash points enumerated")
    assert not os.path.exists(tmp_path / "raw")


def test_control_an_early_acknowledgement_is_caught(tmp_path, reference):
    """The enumeration can fail: a writer that acknowledges a send before the broker has
    it (what a broker acking before its write/fsync does) is caught by I1."""
    keys, total = reference
    for n in range(1, total + 1):
        data = str(tmp_path / "data")
        shutil.rmtree(data, ignore_errors=True)
        path = ack_path(f"early-{n}")
        res = run_plan(data, path, PLAN, CONFIG, ack_early=True,
                       arm={"op": "any", "nth": n, "mode": "before", "segments_only": False,
                            "include_tmp": True})
        if not res.killed:
            continue
        try:
            verify_crash(data, PLAN, read_acks(path), CONFIG, str(tmp_path), keys,
                         twice=False, append_after=False)
        except InvariantViolation as exc:
            assert "I1" in str(exc)
            print(f"fault 3 control: early acknowledgement caught at crash point {n}")
            return
    raise AssertionError("no crash point caught a send acknowledged before it was stored")
