"""Fault 5: a real power cut: the data dir on a loop-mounted ext4 image, the file system
shut down with ``xfs_io -x -c shutdown`` (no log flush: whatever the journal and the disk
did not have is gone, as at a power cut) while producer and transaction threads write.

Then the child is killed, the image unmounted and mounted again (the journal replays),
and the broker recovers: I1 (every acknowledged message; the acknowledgements were
written to /dev/shm, outside the file system that died), I3 and I6. Three rounds, each
cutting after a different number of acknowledgements.

Needs root, loop devices, ``mkfs.ext4`` and ``xfs_io`` (Debian ``xfsprogs``); skipped with
the reason when any is missing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from tests.crashkit import read_acks, reap, start_child
from tests.faults.invariants import verify_recovery
from tests.faults.workload import ack_path, bulk_messages, config_kwargs, make_config

CONFIG = config_kwargs(segment_size=64 * 1024)
PRODUCERS = 3
PER_PRODUCER = 400
N_TX = 200
SENDS, TXS = bulk_messages(PRODUCERS, PER_PRODUCER, N_TX)
PLAN = [{"op": "send", "msgs": ms} for ms in SENDS.values()] + [
    {"op": "prepare", "tx": tx, "group": "shop", "msgs": ms} for tx, ms in TXS.items()]

def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def ext4(tmp_path):
    for tool in ("mkfs.ext4", "xfs_io", "mount", "umount"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (Debian: e2fsprogs, xfsprogs)")
    img = str(tmp_path / "fs.img")
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    with open(img, "wb") as f:
        f.truncate(128 << 20)
    res = _run(["mkfs.ext4", "-q", "-F", img])
    if res.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {res.stderr.strip()}")
    res = _run(["mount", "-o", "loop", img, mnt])
    if res.returncode != 0:
        pytest.skip(f"cannot loop-mount an ext4 image (no loop devices or not root): "
                    f"{res.stderr.strip()}")
    state = {"mounted": True}

    def remount():
        _run(["umount", mnt])
        state["mounted"] = False
        res = _run(["mount", "-o", "loop", img, mnt])
        assert res.returncode == 0, f"remount after the shutdown failed: {res.stderr}"
        state["mounted"] = True

    try:
        yield mnt, remount
    finally:
        if state["mounted"]:
            _run(["umount", mnt])


def _cut(tmp_path, mnt, remount, acks_before_cut: int, wrapper: tuple[str, ...] = ()):
    data = os.path.join(mnt, "data")
    path = ack_path(f"ext4-{acks_before_cut}")
    child = start_child("bulk_writers", data, path, wrapper=wrapper, config=CONFIG,
                        sizes=[PRODUCERS, PER_PRODUCER, N_TX])
    try:
        deadline = time.monotonic() + 90
        # Count acknowledgements only: the child's "opened" line is not one.
        while sum(a["op"] not in ("opened", "done") for a in read_acks(path)) < acks_before_cut:
            assert child.poll() is None, f"the writer died early: {child.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "the writer is too slow"
            time.sleep(0.002)
        res = _run(["xfs_io", "-x", "-c", "shutdown", mnt])
        assert res.returncode == 0, f"xfs_io shutdown failed: {res.stderr}"
    finally:
        child.send_signal(signal.SIGKILL)
        reap(child)
    acks = [a for a in read_acks(path) if a["op"] not in ("opened", "done")]
    assert len(acks) >= acks_before_cut
    remount()
    try:
        verify_recovery(data, PLAN, acks, make_config(CONFIG), str(tmp_path))
    except AssertionError as exc:
        raise AssertionError(f"ext4 shut down after {len(acks)} acknowledgements: {exc}") \
            from exc
    return len(acks)


@pytest.mark.parametrize("acks_before_cut", [40, 250, 600])
def test_real_power_cut_on_ext4(tmp_path, ext4, acks_before_cut):
    mnt, remount = ext4
    n = _cut(tmp_path, mnt, remount, acks_before_cut)
    print(f"fault 5: ext4 shut down after {n} acknowledgements; all recovered")


def test_negative_control_eatmydata_loses_acknowledged_data(tmp_path, ext4):
    """Fault 12 on the real file system: the same writer under ``eatmydata`` (fsync and
    fdatasync become no-ops) must be caught losing acknowledged data."""
    if shutil.which("eatmydata") is None:
        pytest.skip("eatmydata is not installed (Debian: eatmydata)")
    mnt, remount = ext4
    with pytest.raises(AssertionError, match="I1|I4"):
        _cut(tmp_path, mnt, remount, 300, wrapper=("eatmydata",))
