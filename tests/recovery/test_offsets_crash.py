"""Consumer offsets are log records: an acknowledged offset commit survives a kill -9 of the
broker's process *and* the deletion of its index afterwards (issue 12), the fault suite's
invariants hold on a plan that commits offsets, crashed at its fsyncs, and the one-time
upgrade of an old index survives a kill -9 in the middle."""

from __future__ import annotations

import os
import shutil
import signal
import time

import pytest

import fmq
from fmq.datadir import INDEX_DIR
from tests.crashkit import read_acks, reap, run_child, start_child
from tests.engine.test_offset_records import _old_index, offset_records
from tests.faults.invariants import reference_run, verify_crash
from tests.faults.workload import ack_path, config_kwargs, offsets_plan, run_plan
from tests.workloads.offset_committer import GROUPS, QUEUES, commit_of


def _expected(acked: set[int], last_i: int) -> dict[tuple, set]:
    """Per (group, topic, queue): the offsets recovery may show. Commits are made one at a
    time, so only the commit after the last acknowledged one can be in flight."""
    allowed: dict[tuple, set] = {}
    for i in range(last_i + 2):
        group, topic, qid, off = commit_of(i)
        key = (group, topic, qid)
        if i in acked:
            allowed[key] = {off}
        elif i == last_i + 1:
            allowed.setdefault(key, {None}).add(off)
    return allowed


@pytest.mark.parametrize("target", [60, 170])
def test_acknowledged_offset_commits_survive_kill_9_and_a_deleted_index(tmp_path, target):
    data, acks_path = str(tmp_path / "data"), ack_path("offsets")
    proc = start_child("offset_committer", data, acks_path)
    deadline = time.monotonic() + 60
    try:
        while sum(a["op"] == "offset" for a in read_acks(acks_path)) < target:
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the committer made too little progress"
            time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGKILL)
        reap(proc, 10)
    acked = {a["i"] for a in read_acks(acks_path) if a["op"] == "offset"}
    last = max(acked)
    assert acked == set(range(last + 1))
    shutil.rmtree(os.path.join(data, INDEX_DIR))  # only the log is left
    cfg = fmq.BrokerConfig(segment_size=16 * 1024, max_message_size=4096, queues_per_topic=QUEUES)
    with fmq.Broker.open(data, cfg) as b:
        assert b.recovery.index_rebuilt
        got = {(f"g{g}", "t", q): b.reads.committed_offset(f"g{g}", "t", q)
               for g in range(GROUPS) for q in range(QUEUES)}
    for key, allowed in _expected(acked, last).items():
        assert got[key] in allowed, (key, got[key], allowed)


CONFIG = config_kwargs()
PLAN = offsets_plan()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return reference_run(str(tmp_path_factory.mktemp("ref")), PLAN, CONFIG)


@pytest.mark.parametrize("nth,mode", [(3, "after"), (6, "before"), (9, "after"),
                                      (14, "before"), (20, "after")])
def test_invariants_hold_after_a_crash_at_an_fsync_with_the_index_deleted(
        tmp_path, reference, nth, mode):
    keys, _ops = reference
    data = str(tmp_path / "data")
    path = ack_path(f"offsets-{nth}-{mode}")
    res = run_plan(data, path, PLAN, CONFIG, arm={"op": "fdatasync", "nth": nth, "mode": mode})
    assert res.killed, f"the plan ended before fdatasync {nth}: {res.stderr[-2000:]}"
    acks = read_acks(path)
    assert any(a.get("op") == "offset" for a in acks) or nth < 6
    shutil.rmtree(os.path.join(data, INDEX_DIR))
    verify_crash(data, PLAN, acks, CONFIG, str(tmp_path / "work"), keys, append_after=False)


@pytest.mark.parametrize("op,mode,written", [("pwrite", "before", 0), ("fdatasync", "after", 3)])
def test_an_upgrade_killed_midway_is_done_again_on_the_next_open(tmp_path, op, mode, written):
    data = str(tmp_path / "data")
    cfg = dict(segment_size=16 * 1024, max_message_size=4096, queues_per_topic=4)
    with fmq.Broker.open(data, fmq.BrokerConfig(**cfg)) as b:
        for q in range(4):
            b.send_batch([fmq.Message("t", b"m", queue_id=q) for _ in range(5)])
    old = {("g", "t", 0): 3, ("g", "t", 2): 5, ("h", "t", 1): 1}
    _old_index(data, old)
    res = run_child("armed_recovery", data, ack_path(f"upgrade-{mode}"), config=cfg,
                    arm={"op": op, "nth": 1, "mode": mode})
    assert res.killed, res.stderr[-2000:]
    assert len(offset_records(data)) == written  # and the index is not marked upgraded
    with fmq.Broker.open(data, fmq.BrokerConfig(**cfg)) as b:
        assert b._index.consumer_offsets() == old and b._index.offsets_in_log()
    shutil.rmtree(os.path.join(data, INDEX_DIR))
    with fmq.Broker.open(data, fmq.BrokerConfig(**cfg)) as b:
        assert b._index.consumer_offsets() == old
