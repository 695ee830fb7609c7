"""Fault 1: a torn tail at every byte offset of the last records.

A reference log is written by a child (plain sends, then a transaction prepared and
committed, so the last records are MESSAGE, PREPARE, PRE_MESSAGE, TX_MESSAGE, COMMIT).
For every byte offset ``k`` inside the last records, the bytes ``[k, end)`` are replaced
by zeros (never written: the segment is preallocated) or by garbage (a half-written
sector), and the data dir is recovered. Every record that ends at or before ``k`` must
survive (I1), the log must be a prefix of the reference (I2), a COMMIT whose REF/TX
records survived is rolled forward, a transaction whose PREPARE survived is open (I3).
On a sample of the offsets (every record boundary and its neighbours, and every 97th byte)
the full I5/I6 checks run too: recover twice (the first time killed right after open),
index equals a rebuild, then append in a child, crash it mid-write and recover again.
"""

from __future__ import annotations

import os
import random
import shutil

import pytest

from fmq.datadir import LOG_DIR, format_segment_name
from tests.faults.invariants import (
    log_records,
    record_key,
    verify_crash,
    verify_recovery,
    write_reference,
)
from tests.faults.workload import (
    config_kwargs,
    copy_dir,
    make_config,
    msg,
    small_plan,
)

PLAN = small_plan()[:9] + [
    {"op": "send", "msgs": [msg("last-m", 150, key="kl")]},
    {"op": "prepare", "tx": "last-tx", "group": "shop", "msgs": [msg("last-t", 60, "pay")]},
    {"op": "commit", "tx": "last-tx"},
]
CONFIG = config_kwargs()
LAST_RECORDS = 5


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The reference data dir (closed cleanly, then its checkpoint and index removed so
    that recovery replays the tail, as after a crash) and its record keys."""
    return write_reference(str(tmp_path_factory.mktemp("torn")), PLAN, CONFIG)


def _tear(data: str, keys: list[tuple], k: int, variant: str, rng: random.Random) -> None:
    """Replace log bytes [k, end of the last record) with zeros or garbage."""
    end = keys[-1][1] + keys[-1][2]
    seg_base = max(b for b in (0, 16 * 1024, 32 * 1024, 48 * 1024) if b <= keys[-1][1])
    assert seg_base <= k, "tear offsets stay inside the last segment"
    path = os.path.join(data, LOG_DIR, format_segment_name(seg_base))
    n = end - k
    junk = bytes(n) if variant == "zeros" else rng.randbytes(n)
    with open(path, "r+b") as f:
        f.seek(k - seg_base)
        f.write(junk)


@pytest.mark.parametrize("variant", ["zeros", "garbage"])
def test_torn_tail_at_every_byte_offset_of_the_last_records(tmp_path, written, variant):
    base, keys, all_acks = written
    rng = random.Random(f"fault1-{variant}")
    config = make_config(CONFIG)
    last = keys[-LAST_RECORDS:]
    first_k = last[0][1]
    end = last[-1][1] + last[-1][2]
    boundaries = {key[1] for key in last} | {end}
    tried = 0
    for k in range(first_k, end):
        data = copy_dir(base, str(tmp_path / "data"))
        # recovery must replay the tail: drop what the clean close left behind
        os.unlink(os.path.join(data, "checkpoint"))
        shutil.rmtree(os.path.join(data, "index"))
        _tear(data, keys, k, variant, rng)
        survivors = [key for key in keys if key[1] + key[2] <= k]
        # only what ended before the tear was acknowledged
        acks = [a for a in all_acks if a["op"] in ("send", "prepare", "commit")
                and _acked_before(a, keys, k)]
        full = any(abs(k - b) <= 1 for b in boundaries) or k % 97 == 0
        try:
            if full:
                verify_crash(data, PLAN, acks, CONFIG, str(tmp_path), keys)
            else:
                verify_recovery(data, PLAN, acks, config, str(tmp_path), keys, rebuild=False)
            got = [record_key(r) for r in log_records(data)]
            assert got[: len(survivors)] == survivors, "a record before the tear was lost"
        except AssertionError as exc:
            raise AssertionError(f"torn tail ({variant}) at log offset {k}: {exc}") from exc
        tried += 1
    assert tried == end - first_k
    print(f"fault 1 ({variant}): {tried} torn-tail offsets tried")


def _acked_before(a: dict, keys: list[tuple], k: int) -> bool:
    """Whether the acknowledged step ``a`` lies wholly before log offset ``k``."""
    if a["op"] == "send":
        return all(off < k for off, _q, _qo in a["results"]) and all(
            key[1] + key[2] <= k for key in keys if key[1] in {r[0] for r in a["results"]})
    tx = a["tx"]
    kinds = {"prepare": ("PREPARE", "PRE_MESSAGE"), "commit": ("COMMIT",)}[a["op"]]
    return all(key[1] + key[2] <= k for key in keys if key[6] == tx and key[0] in kinds)
