"""Fault 11: a second process opening the same data dir is refused with DataDirLocked.

A child holds the broker open; a second child and this process (``Broker.open``, the index
rebuild and ``fmq log repair``'s cut) are each refused with :class:`fmq.DataDirLocked`
naming the directory, and nothing in the data dir changes. Once the holder is SIGKILLed
the lock is gone with it (flock), and the next open recovers everything acknowledged.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

import fmq
from fmq.admin.rebuild_index import rebuild_index
from fmq.admin.repair import cut_log
from tests.crashkit import ROOT, read_acks, workload_command
from tests.faults.invariants import log_records, record_key
from tests.faults.workload import ack_path, body_for, config_kwargs, make_config
from tests.workloads.lock_contender import REFUSED

CONFIG = config_kwargs()


def _snapshot(data: str) -> dict[str, bytes]:
    out = {}
    for root, _dirs, files in os.walk(data):
        for f in files:
            if f not in ("LOCK", "lock.mdb"):
                p = os.path.join(root, f)
                out[os.path.relpath(p, data)] = pathlib.Path(p).read_bytes()
    return out


def test_second_process_is_refused_until_the_holder_dies(tmp_path):
    data = str(tmp_path / "data")
    acks = ack_path("holder")
    holder = subprocess.Popen(workload_command("lock_holder", data, acks, config=CONFIG),
                              cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not any(a["op"] == "holding" for a in read_acks(acks)):
            assert holder.poll() is None, "the holder died"
            assert time.monotonic() < deadline, "the holder never opened the broker"
            time.sleep(0.05)
        before = _snapshot(data)
        second = subprocess.run(
            [sys.executable, "-m", "tests.workloads.lock_contender", data, json.dumps(CONFIG)],
            capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert second.returncode == REFUSED and "LOCKED" in second.stdout, \
            f"a second process was not refused: {second.stdout} {second.stderr[-2000:]}"
        assert os.path.abspath(data) in second.stdout
        config = make_config(CONFIG)
        with pytest.raises(fmq.DataDirLocked) as info:
            fmq.Broker.open(data, config)
        assert os.path.abspath(data) in str(info.value)
        with pytest.raises(fmq.DataDirLocked):
            rebuild_index(data, config)
        with pytest.raises(fmq.DataDirLocked):
            cut_log(data, 0)
        assert _snapshot(data) == before, "a refused open changed the data dir"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    sent = [a for a in read_acks(acks) if a["op"] == "send"]
    assert len(sent) == 5
    with fmq.Broker.open(data, make_config(CONFIG)) as b:  # the flock died with the holder
        b.wait_indexed(30)
        got = b.reads.pull("orders", 0, 0, 10)
        assert [m.body for m in got] == [body_for(f"h{i}", 500) for i in range(5)]
    offsets = {record_key(r)[1] for r in log_records(data)}
    assert {a["offset"] for a in sent} <= offsets
