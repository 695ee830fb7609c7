"""Fault 2: a bit flip, or a zeroed 512-byte sector, inside a sealed segment and inside the
synced part of the active one (I4).

The workload's log has a sealed first segment (ending with its filler) and an active
second one. Damage at every record (a bit flipped in its header, in its middle and in its
last byte) and in every 512-byte sector that holds records, anywhere but in the very last
record of the log (damage there is indistinguishable from a torn write and is fault 1).

* ``full-scan`` (no checkpoint, no index: recovery validates the whole log):
  ``Broker.open`` must raise :class:`fmq.CorruptLog` whose ``segment`` is the damaged
  segment's file and whose ``offset`` is the first damaged record's log offset.
* ``checkpointed`` (as left by a clean close): recovery starts at the checkpoint, so the
  damage may lie before it. Either open raises CorruptLog naming the segment and a damaged
  record (the scan may start inside a zeroed sector), or it opens, and then
  ``fmq log verify``'s scanner names the damage exactly, and every consumable message
  reads back byte-identical or fails with a typed FMQError naming the damaged offset.

In both cases nothing is cut: every segment file is byte-for-byte what it was.
"""

from __future__ import annotations

import os
import pathlib
import random
import shutil

import pytest

import fmq
from fmq.datadir import LOG_DIR, format_segment_name
from fmq.log.scanner import LogScanner
from tests.faults.invariants import write_reference
from tests.faults.workload import (
    TOPICS,
    body_for,
    config_kwargs,
    copy_dir,
    make_config,
    message_id,
    plan_messages,
    small_plan,
)

PLAN = small_plan()
CONFIG = config_kwargs()
SEG = CONFIG["segment_size"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    data, keys, acks = write_reference(str(tmp_path_factory.mktemp("corrupt")), PLAN, CONFIG)
    assert acks[-1]["op"] == "closed"
    return data, keys


def _cases(keys: list[tuple], where: str, rng: random.Random) -> list[tuple]:
    """(kind, log offset of the damaged byte or sector, length, first damaged record)."""
    segment = 0 if where == "sealed" else 1
    recs = [k for k in keys[:-1] if k[1] // SEG == segment]  # never the last record
    assert recs, "the workload must fill both segments"
    cases = []
    for k in recs:
        off, size = k[1], k[2]
        for pos in (off + rng.randrange(0, 72), off + size // 2, off + size - 1):
            cases.append(("bitflip", pos, 1, off))
    start, stop = recs[0][1], recs[-1][1] + recs[-1][2]
    last_off = keys[-1][1]
    for sector in range(start - start % 512, stop, 512):
        if sector + 512 > last_off:
            break  # reaches the last record: a torn write, not corruption
        first = next(k[1] for k in keys if k[1] + k[2] > sector)
        cases.append(("sector", sector, 512, first))
    return cases


def _damage(data: str, kind: str, off: int, rng: random.Random) -> int | None:
    """Damage the log; returns the log offset of the first byte that changed (None when
    the sector was zeros already, e.g. a filler's zero length fields)."""
    path = os.path.join(data, LOG_DIR, format_segment_name(off - off % SEG))
    with open(path, "r+b") as f:
        f.seek(off % SEG)
        if kind == "bitflip":
            b = f.read(1)[0]
            f.seek(off % SEG)
            f.write(bytes([b ^ (1 << rng.randrange(8))]))
            return off
        old = f.read(512)
        f.seek(off % SEG)
        f.write(bytes(512))
    changed = next((i for i, b in enumerate(old) if b), None)
    return None if changed is None else off + changed


def _segment_bytes(data: str) -> dict[str, bytes]:
    d = os.path.join(data, LOG_DIR)
    return {n: pathlib.Path(d, n).read_bytes() for n in sorted(os.listdir(d))}


@pytest.mark.parametrize("mode", ["full-scan", "checkpointed"])
@pytest.mark.parametrize("where", ["sealed", "active"])
def test_damage_outside_the_tail_is_named_never_cut(tmp_path, written, where, mode):
    base, keys = written
    rng = random.Random(f"fault2-{where}-{mode}")
    config = make_config(CONFIG)
    msgs = plan_messages(PLAN)
    cases = _cases(keys, where, rng)
    opened = tried = 0
    for kind, off, _n, first in cases:
        data = copy_dir(base, str(tmp_path / "data"))
        if mode == "full-scan":
            os.unlink(os.path.join(data, "checkpoint"))
            shutil.rmtree(os.path.join(data, "index"))
        changed = _damage(data, kind, off, rng)
        if changed is None:
            continue
        first = next(k[1] for k in keys if k[1] + k[2] > changed)
        damaged = {str(k[1]) for k in keys if k[1] + k[2] > changed and k[1] < off + _n}
        tried += 1
        before = _segment_bytes(data)
        seg_name = format_segment_name(off - off % SEG)
        what = f"{kind} at log offset {off} ({where} segment, {mode})"
        try:
            broker = fmq.Broker.open(data, config)
        except fmq.CorruptLog as exc:
            # a full scan meets the first damaged record; a scan from the checkpoint may
            # start inside a damaged sector and name a later damaged record of it
            ok = {first} if mode == "full-scan" else {int(d) for d in damaged}
            assert exc.segment == seg_name and exc.offset in ok, \
                f"{what}: CorruptLog names {exc.segment}@{exc.offset}, expected {seg_name}@{first}"
            assert seg_name in str(exc) and str(exc.offset) in str(exc)
        else:
            assert mode == "checkpointed", f"{what}: the broker opened on a corrupt log"
            opened += 1
            try:
                with pytest.raises(fmq.CorruptLog) as info:
                    list(LogScanner(os.path.join(data, LOG_DIR)))
                assert (info.value.segment, info.value.offset) == (seg_name, first), what
                for topic in TOPICS:
                    for qid in range(config.queues_per_topic):
                        lo, hi = broker.reads.queue_range(topic, qid)
                        for q in range(lo, hi):
                            try:
                                got = broker.reads.pull(topic, qid, q, 1)
                            except fmq.FMQError as exc:
                                assert any(f"offset {d}" in str(exc) for d in damaged), \
                                    f"{what}: {exc}"
                                continue
                            for m in got:
                                mid = message_id(m.body)
                                assert m.body == body_for(mid, msgs[mid]["size"]), \
                                    f"{what}: message {mid} reads back with other bytes"
            finally:
                broker.close()
        assert _segment_bytes(data) == before, f"{what}: the log was modified"
    assert tried > len(cases) * 0.9
    print(f"fault 2 ({where}, {mode}): {tried} damages named; opened {opened}")


def test_refused_open_releases_everything(tmp_path, written):
    """Opening a corrupt log again and again (an operator or a supervisor retrying) leaks
    no file descriptor, index mapping or thread, and never takes the lock for good."""
    import threading

    base, keys = written
    data = copy_dir(base, str(tmp_path / "data"))
    os.unlink(os.path.join(data, "checkpoint"))
    shutil.rmtree(os.path.join(data, "index"))
    _damage(data, "bitflip", keys[3][1] + 10, random.Random(2))
    config = make_config(CONFIG)
    fds = len(os.listdir("/proc/self/fd"))
    threads = threading.active_count()
    for _ in range(30):
        with pytest.raises(fmq.CorruptLog):
            fmq.Broker.open(data, config)
    assert len(os.listdir("/proc/self/fd")) <= fds, "a refused open leaked file descriptors"
    assert threading.active_count() <= threads, "a refused open left threads running"
