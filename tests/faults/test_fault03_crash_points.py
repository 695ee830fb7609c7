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
#: The indexer process (``index_writer = "process"``) under the same crashes: its broker
#: is SIGKILLed at every ``PROCESS_STRIDE``-th operation, then recovered with it.
PROCESS_CONFIG = config_kwargs(index_writer="process")
PROCESS_STRIDE = 3


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return reference_run(str(tmp_path_factory.mktemp("ref")), PLAN, CONFIG)


def _crash_at(tmp_path, reference, n: int, mode: str, config: dict = CONFIG,
              **checks) -> bool:
    """Crash the workload at operation ``n``; False when it completed without crashing."""
    keys, _ops = reference
    data = str(tmp_path / "data")
    shutil.rmtree(data, ignore_errors=True)
    path = ack_path(f"crash-{n}")
    res = run_plan(data, path, PLAN, config,
                   arm={"op": "any", "nth": n, "mode": mode, "segments_only": False,
                        "include_tmp": True})
    acks = read_acks(path)
    if res.returncode == 0:
        assert acks[-1]["op"] == "closed"
        return False
    assert res.killed, f"crash point {n}: the child failed instead of crashing:\n{res.stderr[-3000:]}"
    try:
        verify_crash(data, PLAN, acks, config, str(tmp_path), keys, **checks)
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


def test_crash_points_with_the_indexer_process(tmp_path, reference):
    """The same crashes with the index written by the indexer process: the killed broker's
    indexer ends with it, and recovery (with an indexer process again) keeps I1-I6. Every
    third crash point, to keep the suite's time (``FMQ_INDEX_WRITER=process`` runs them all
    and the whole suite so)."""
    _keys, total = reference
    points = sorted({*range(1, total + 1, PROCESS_STRIDE), total})
    for n in points:
        assert _crash_at(tmp_path, reference, n, "before", PROCESS_CONFIG,
                         twice=n % 2 == 1, append_after=n % 4 == 1), \
            f"crash point {n}: the workload completed (the reference counted {total})"
    assert not _crash_at(tmp_path, reference, total + 1, "before", PROCESS_CONFIG)
    print(f"fault 3 (indexer process): {len(points)} of {total} crash points")


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
