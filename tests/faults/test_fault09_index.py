"""Fault 9: the index deleted, truncated, garbage-filled, lagging, or ahead of the log after
a tail cut.

The index is derived data: whatever happened to it, opening the broker must give every
acknowledged message (I1), whole transactions (I3), and an index equal to a rebuild from the
log (I6); never a crash, never a silently wrong answer.
"""

from __future__ import annotations

import os
import pathlib
import random
import shutil

import pytest

import fmq
from fmq.datadir import INDEX_DIR, LOG_DIR, format_segment_name
from fmq.index.store import IndexStore
from fmq.recovery.checkpoint import read_checkpoint
from tests.faults.invariants import (
    fail,
    verify_recovery,
    without_store_times,
    write_reference,
)
from tests.faults.workload import (
    config_kwargs,
    copy_dir,
    execute,
    make_config,
    msg,
    small_plan,
)

PLAN = small_plan()
CONFIG = config_kwargs()
SEG = CONFIG["segment_size"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return write_reference(str(tmp_path_factory.mktemp("index")), PLAN, CONFIG)


def _log_bytes(data: str) -> dict[str, bytes]:
    d = os.path.join(data, LOG_DIR)
    return {n: pathlib.Path(d, n).read_bytes() for n in sorted(os.listdir(d))}


def _log_bytes_after_cut(base: str, last_seg: int, cut: int) -> dict[str, bytes]:
    out = _log_bytes(base)
    name = format_segment_name(last_seg)
    out[name] = out[name][: cut - last_seg] + bytes(SEG - (cut - last_seg))
    return out


def _mdb(data: str) -> str:
    return os.path.join(data, INDEX_DIR, "data.mdb")


def _damage_index(data: str, how: str, rng: random.Random) -> None:
    path = _mdb(data)
    size = os.path.getsize(path)
    if how == "deleted":
        shutil.rmtree(os.path.join(data, INDEX_DIR))
    elif how == "emptied":
        os.truncate(path, 0)
    elif how == "truncated-to-meta":
        os.truncate(path, 8192)  # the two meta pages only: the B-tree pages are gone
    elif how == "truncated-half":
        os.truncate(path, size // 2)
    elif how == "garbage":
        with open(path, "r+b") as f:
            f.write(rng.randbytes(size))
    elif how == "garbage-meta":
        with open(path, "r+b") as f:
            f.write(rng.randbytes(8192))
    elif how == "lock-file-garbage":
        with open(os.path.join(data, INDEX_DIR, "lock.mdb"), "r+b") as f:
            f.write(rng.randbytes(4096))
    else:
        raise ValueError(how)


HOW = ["deleted", "emptied", "truncated-to-meta", "truncated-half", "garbage", "garbage-meta",
       "lock-file-garbage"]


@pytest.mark.parametrize("how", HOW)
def test_damaged_index_is_rebuilt(tmp_path, written, how):
    base, keys, acks = written
    data = copy_dir(base, str(tmp_path / "data"))
    _damage_index(data, how, random.Random(how))
    try:
        verify_recovery(data, PLAN, acks, make_config(CONFIG), str(tmp_path), keys)
    except AssertionError as exc:
        raise AssertionError(f"index {how}: {exc}") from exc


def test_lagging_index_catches_up(tmp_path):
    """The index of an earlier moment, with the log (and checkpoint) of a later one."""
    data = str(tmp_path / "data")
    config = make_config(CONFIG)
    acks: list[dict] = []
    with fmq.Broker.open(data, config) as b:
        execute(b, PLAN[:6], lambda **e: acks.append(e))
    stale = copy_dir(os.path.join(data, INDEX_DIR), str(tmp_path / "stale-index"))
    with fmq.Broker.open(data, config) as b:
        execute(b, PLAN, lambda **e: acks.append(e), start=6)
    shutil.rmtree(os.path.join(data, INDEX_DIR))
    shutil.copytree(stale, os.path.join(data, INDEX_DIR))
    verify_recovery(data, PLAN, acks, config, str(tmp_path))


@pytest.mark.parametrize("checkpoint", ["absent", "kept"])
def test_index_ahead_of_a_cut_log(tmp_path, written, checkpoint):
    """The log loses its tail (cut at each record boundary of the last segment) while the
    index still describes the longer log. Without a checkpoint the cut is a torn tail: the
    index must drop what lies past it (I6). With the checkpoint of the longer log kept, the
    cut removed data the checkpoint recorded as synced: recovery must refuse with
    CorruptLog naming where the valid records end, not cut or leave a hole."""
    base, keys, acks = written
    config = make_config(CONFIG)
    last_seg = keys[-1][1] - keys[-1][1] % SEG
    cuts = [k[1] for k in keys if k[1] >= last_seg and k[0] != "FILLER"]
    assert len(cuts) >= 5
    for cut in cuts:
        data = copy_dir(base, str(tmp_path / "data"))
        if checkpoint == "absent":
            os.unlink(os.path.join(data, "checkpoint"))
        path = os.path.join(data, LOG_DIR, format_segment_name(last_seg))
        with open(path, "r+b") as f:
            f.seek(cut - last_seg)
            f.write(bytes(SEG - (cut - last_seg)))
        survivors = {k[1] for k in keys if k[1] + k[2] <= cut}
        kept = [a for a in acks if a["op"] == "send"
                and all(off in survivors for off, *_ in a["results"])]
        if checkpoint == "kept":
            with pytest.raises(fmq.CorruptLog) as info:
                fmq.Broker.open(data, config)
            # recovery reads from the checkpoint's recovery offset on: a cut before it is
            # noticed where that scan starts (nothing valid there)
            start = read_checkpoint(os.path.join(data, "checkpoint")).recovery_offset
            assert (info.value.segment, info.value.offset) == \
                (format_segment_name(last_seg), max(cut, start)), f"cut at {cut}"
            assert _log_bytes(data) == _log_bytes_after_cut(base, last_seg, cut), \
                "recovery modified the log it refused"
            continue
        try:
            verify_recovery(data, PLAN, kept, config, str(tmp_path), keys)
        except AssertionError as exc:
            raise AssertionError(f"log cut at {cut}: {exc}") from exc


def test_rebuild_after_retention_equals_the_live_index(tmp_path):
    """Retention deleted the oldest segments; an index rebuilt from what is left must equal
    the live one (queue minimums included): the same pull answers before and after."""
    data = str(tmp_path / "data")
    config = make_config(config_kwargs(retention_bytes=40 * 1024))
    # "pay" gets messages only at first: retention empties its queues completely, and
    # only the queue-floors file remembers their offsets for a rebuilt index
    plan = [{"op": "send", "msgs": [msg(f"r{i}", 1500, ("orders", "pay")[i < 10],
                                        key=f"k{i % 4}")]} for i in range(60)]
    with fmq.Broker.open(data, config) as b:
        execute(b, plan, lambda **e: None)
        # Retention deletes only what the index covers (its floor is the checkpoint's
        # applied offset): an index writer that lags (the indexer process) keeps it all.
        assert b.wait_indexed(30)
        assert b.enforce_retention(), "retention deleted nothing"
        b.wait_indexed(30)
        live = without_store_times(b._index.dump())
        ranges = {(t, q): b.reads.queue_range(t, q) for t in ("orders", "pay") for q in range(2)}
    shutil.rmtree(os.path.join(data, INDEX_DIR))
    with fmq.Broker.open(data, config) as b:
        b.wait_indexed(30)
        rebuilt = without_store_times(b._index.dump())
        got = {(t, q): b.reads.queue_range(t, q) for t in ("orders", "pay") for q in range(2)}
    assert ranges[("pay", 0)][0] == ranges[("pay", 0)][1] > 0, "pay was not emptied"
    assert got == ranges, f"queue ranges after the rebuild {got}, live {ranges}"
    with fmq.Broker.open(data, config) as b:  # new messages continue the old offsets
        r = b.send(fmq.Message("pay", b"after", queue_id=0))
        assert r.queue_offset == ranges[("pay", 0)][1]
    for name in live:
        if live[name] != rebuilt.get(name):
            fail("I6", f"index database {name} differs after a rebuild following retention")
    store = IndexStore(os.path.join(data, INDEX_DIR))
    store.close()
