"""Fault 6: group commit under crashes, with interleaved producers.

A child runs 4 producer threads sending one message at a time and 2 threads running
transactions (prepare, then commit or roll back), all sharing the log's group commit. It is
killed at the N-th fdatasync (``before``: the batch is written but not synced, no ack may
have left; ``after``: the batch is durable but the acks never went out) or halfway through
the N-th segment pwrite (``torn``), for N = 1..8, then every third N until the workload completes (to bound the time; the
full recover-twice check on every third crash point, append-crash-recover on every sixth).

Checked after each crash: I1 (every acknowledged message present, byte-identical, at the
queue offset it was acknowledged with), I2 for concurrent writers (no record twice, and
each producer's messages are a prefix of what it sent: no hole inside a producer's
sequence, since it sends one at a time), I3, I5 (recover twice; append, crash, recover) and
I6. Durability of the acks against *lost* page cache is fault 4's job (power loss).
"""

from __future__ import annotations

import shutil

import pytest

from fmq.log.record import RecordType
from tests.crashkit import read_acks, run_child
from tests.faults.invariants import fail, log_records, verify_crash
from tests.faults.workload import ack_path, config_kwargs, message_id, msg

CONFIG = config_kwargs(segment_size=32 * 1024)
PRODUCERS = 4
PER_PRODUCER = 8
TX_THREADS = 2
TX_PER_THREAD = 3


def _messages():
    sends = {p: [msg(f"p{p}.{k}", 200 + (p * 131 + k * 97) % 1500, ("orders", "pay")[p % 2],
                     key=f"k{p}" if k % 3 == 0 else None)
                 for k in range(PER_PRODUCER)] for p in range(PRODUCERS)}
    txs = {f"x{t}.{k}": [msg(f"x{t}.{k}.{j}", 50 + 300 * j, "pay") for j in range(2)]
           for t in range(TX_THREADS) for k in range(TX_PER_THREAD)}
    return sends, txs


SENDS, TXS = _messages()
# the plan form of everything the child may do, for the checker's message table
PLAN = [{"op": "send", "msgs": ms} for ms in SENDS.values()] + [
    {"op": "prepare", "tx": tx, "group": "shop", "msgs": ms} for tx, ms in TXS.items()]

def check_concurrent_prefix(data_dir: str) -> None:
    """I2 for concurrent producers: no duplicates, each producer's sequence has no hole."""
    seen = set()
    per_producer: dict[str, list[int]] = {}
    for r in log_records(data_dir):
        if r.type in (RecordType.MESSAGE, RecordType.PRE_MESSAGE, RecordType.TX_MESSAGE):
            mid = message_id(r.body)
            key = (r.type, mid)
            if key in seen:
                fail("I2", f"{RecordType(r.type).name} of {mid} is in the log twice")
            seen.add(key)
            if r.type == RecordType.MESSAGE:
                p, k = mid[1:].split(".")
                per_producer.setdefault(p, []).append(int(k))
    for p, ks in per_producer.items():
        if ks != list(range(len(ks))):
            fail("I2", f"producer {p}'s messages lie in the log as {ks}: a hole or reordering")


@pytest.mark.parametrize("op,mode", [("fdatasync", "before"), ("fdatasync", "after"),
                                     ("pwrite", "torn")])
def test_group_commit_crash_before_and_after_fsync(tmp_path, op, mode):
    crashed = 0
    n = 1
    while True:
        data = str(tmp_path / "data")
        shutil.rmtree(data, ignore_errors=True)
        path = ack_path(f"group-{n}")
        res = run_child("group_commit_writers", data, path, config=CONFIG,
                        arm={"op": op, "nth": n, "mode": mode}, sends=SENDS, txs=TXS,
                        tx_threads=TX_THREADS, tx_per_thread=TX_PER_THREAD)
        acks = read_acks(path)
        if res.returncode == 0:
            assert acks[-1]["op"] == "done"
            break
        assert res.killed, f"{op} #{n} {mode}: the child failed:\n{res.stderr[-3000:]}"
        try:
            check_concurrent_prefix(data)
            verify_crash(data, PLAN, acks, CONFIG, str(tmp_path), None,
                         twice=n % 3 == 1, append_after=n % 6 == 1)
        except AssertionError as exc:
            raise AssertionError(f"crash at {op} #{n} ({mode}): {exc}") from exc
        crashed += 1
        n += 1 if n < 8 else 3
    assert crashed >= 5, f"only {crashed} crash points: the workload batches too much"
    print(f"fault 6 ({op} {mode}): {crashed} crash points")
