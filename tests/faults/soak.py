"""A randomized crash soak: ``python -m tests.faults.soak --seed N --minutes M``.

One data dir lives across iterations (so recovery meets long logs, old checkpoints,
retention and transactions left open by earlier runs); every ``--fresh-every`` iterations
it starts over. Each iteration, drawn from ``random.Random(f"{seed}/{i}")``:

1. a random plan (sends, prepares, commits and rollbacks, including of transactions left
   open by earlier iterations, checkpoints, retention) runs in a child process;
2. CrashingIO kills it at a random operation (before it, after it, or halfway through a
   pwrite), or the plan completes and the child exits without closing the broker;
3. the parent checks I1 (every acknowledgement of every iteration so far, minus what
   retention deleted), I2 (the records of the last recovered log are still there,
   byte-identical, apart from whole segments retention deleted), I3, I6 and, every
   ``--twice-every`` iterations, I5 (recover twice, the first time killed after open).

Everything is deterministic given the seed (single-threaded child, no background timers),
so a failure is replayed with the same ``--seed``, ``--start`` = the failing iteration
(the replay begins at the last fresh data dir before it) and ``--iterations`` = the failing
iteration + 1; ``--keep`` keeps the data dir. The seed is printed first.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
import traceback

from tests.crashkit import read_acks
from tests.faults.invariants import (
    check_acked_and_transactions,
    check_index_matches_rebuild,
    compare_states,
    log_records,
    open_broker,
    record_key,
    state_of,
)
from tests.faults.powerloss import PowerLossIO, run_until_power_cut
from tests.faults.workload import (
    GROUP,
    ack_path,
    config_kwargs,
    copy_dir,
    make_config,
    random_plan,
    recover_and_die,
    run_plan,
)

SOAK_CONFIG = config_kwargs(retention_bytes=64 * 1024, max_open_transactions=64)


def _resolve_old(rng: random.Random, plan: list[dict], open_txs: list[str]) -> list[dict]:
    """Insert commit/rollback of a few transactions left open by earlier iterations."""
    for tx in list(open_txs):
        if rng.random() < 0.4:
            pos = rng.randint(0, len(plan))
            plan.insert(pos, {"op": rng.choice(["commit", "rollback"]), "tx": tx})
    return plan


class Soak:
    def __init__(self, seed: int, workdir: str, fresh_every: int, twice_every: int,
                 verbose: bool, power_every: int = 0) -> None:
        self.seed = seed
        self.workdir = workdir
        self.fresh_every = fresh_every
        self.twice_every = twice_every
        self.verbose = verbose
        self.config = make_config(SOAK_CONFIG)
        self.crashes = 0
        self.completed = 0
        self.iterations = 0
        self.records_checked = 0
        self.power_cuts = 0
        self.power_every = power_every
        self._reset()

    def _reset(self) -> None:
        self.data = os.path.join(self.workdir, "data")
        shutil.rmtree(self.data, ignore_errors=True)
        self.plans: list[dict] = []
        self.acks: list[dict] = []
        self.last_log: list[tuple] = []
        self.open_txs: list[str] = []

    def iteration(self, i: int) -> str:
        rng = random.Random(f"{self.seed}/{i}")
        if i and i % self.fresh_every == 0:
            self._reset()
        plan = random_plan(rng, rng.randint(3, 25), prefix=f"i{i}.", retention=True)
        plan = _resolve_old(rng, plan, self.open_txs)
        for op in plan:
            if op["op"] == "prepare":
                op["group"] = GROUP
        kind = rng.random()
        if self.power_every and i % self.power_every == self.power_every - 1:
            return self._power_iteration(i, rng, plan)
        if kind < 0.1:
            arm = None  # no crash: the child exits without closing (SIGKILL at the end)
        else:
            op = rng.choice(["any", "any", "any", "pwrite", "fdatasync", "rename", "fsync_dir",
                             "unlink"])
            nth = {"any": 3 * len(plan), "pwrite": len(plan), "fdatasync": len(plan)}.get(op, 3)
            arm = {"op": op, "nth": rng.randint(1, nth),
                   "mode": rng.choice(["before", "after", "torn"]),
                   "segments_only": False, "include_tmp": rng.random() < 0.5}
        path = ack_path(f"soak-{i}")
        res = run_plan(self.data, path, plan, SOAK_CONFIG, arm=arm, close=False,
                       die_at_end=True)
        acks = read_acks(path)
        os.unlink(path)
        if not res.killed:
            raise AssertionError(f"the child did not crash but exited {res.returncode}:\n"
                                 f"{res.stderr[-4000:]}")
        done = bool(acks) and acks[-1]["op"] == "done"
        self.completed += done
        self.crashes += not done
        self.plans += plan
        self.acks += [a for a in acks if a["op"] not in ("opened", "done", "closed")]
        return self._check(i, f"{len(plan)} ops, {'completed' if done else 'crashed'} "
                              f"({arm['op'] + ' #' + str(arm['nth']) + ' ' + arm['mode'] if arm else 'no fault'})")

    def _power_iteration(self, i: int, rng: random.Random, plan: list[dict]) -> str:
        """The plan runs in this process on PowerLossIO; the power is cut at a random
        operation and the files rewritten as a disk could hold them (random keep / drop /
        garble of unsynced writes and directory entries; index kept, deleted or rolled back
        to the last checkpoint)."""
        snaps = os.path.join(self.workdir, "snaps")
        shutil.rmtree(snaps, ignore_errors=True)
        os.makedirs(snaps)
        io = PowerLossIO(cut_at=rng.randint(1, 3 * len(plan) + 2), snapshot_dir=snaps)
        acks = run_until_power_cut(self.data, self.config, plan, io)
        self.plans += plan
        self.acks += acks
        if not io.dead:
            self.completed += 1
            return self._check(i, f"{len(plan)} ops, power never cut")
        self.power_cuts += 1
        decided = io.apply_power_cut(rng, "random")
        fate = rng.choice(["keep", "delete", "checkpoint"])
        index = os.path.join(self.data, "index")
        if fate != "keep":
            shutil.rmtree(index, ignore_errors=True)
            if fate == "checkpoint" and io.index_snapshot:
                shutil.copytree(io.index_snapshot, index)
        return self._check(i, f"{len(plan)} ops, power cut at op {io.cut_at} ({decided}, "
                              f"index {fate})")

    def _check(self, i: int, what: str) -> str:
        raw = copy_dir(self.data, os.path.join(self.workdir, "raw"))
        broker = open_broker(self.data, self.config)
        try:
            records = log_records(self.data)
            keys = [record_key(r) for r in records]
            first = keys[0][1] if keys else 0
            kept = [k for k in self.last_log if k[1] >= first]
            if keys[: len(kept)] != kept:
                i_diff = next((j for j, (a, b) in enumerate(zip(keys, kept, strict=False))
                               if a != b), min(len(keys), len(kept)))
                raise AssertionError(f"I2 violated: the records recovered last time changed "
                                     f"at #{i_diff} ({len(kept)} kept, {len(keys)} now)")
            check_acked_and_transactions(broker, records, self.plans, self.acks, retention=True)
            state = state_of(broker, self.data)
            self.open_txs = [t[0] for t in state["open"]]
            check_index_matches_rebuild(broker, self.data, self.config, self.workdir)
        finally:
            broker.close()
        self.last_log = [record_key(r) for r in log_records(self.data)]
        self.records_checked += len(self.last_log)
        if self.twice_every and i % self.twice_every == 0:
            res = recover_and_die(raw, ack_path("twice"), SOAK_CONFIG)
            if not res.killed:
                raise AssertionError(f"recover-and-die child: {res.stderr[-3000:]}")
            b = open_broker(raw, self.config)
            try:
                again = state_of(b, raw)
            finally:
                b.close()
            compare_states(state, again, "recovering twice")
        shutil.rmtree(raw, ignore_errors=True)
        return f"{what}, log {len(self.last_log)} records, {len(self.open_txs)} open tx"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.faults.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=None, help="random seed (default: from time)")
    p.add_argument("--minutes", type=float, default=1.0, help="stop after this long")
    p.add_argument("--iterations", type=int, default=0,
                   help="stop after this many iterations (replaying a failure)")
    p.add_argument("--start", type=int, default=0,
                   help="first iteration (rounded down to a multiple of --fresh-every, where "
                        "the data dir starts empty, so a late failure replays quickly)")
    p.add_argument("--fresh-every", type=int, default=40)
    p.add_argument("--twice-every", type=int, default=3)
    p.add_argument("--power-every", type=int, default=4,
                   help="every N-th iteration cuts the power (PowerLossIO, in this process) "
                        "instead of killing a child (0: never)")
    p.add_argument("--workdir", default=None)
    p.add_argument("--keep", action="store_true", help="keep the work dir")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    print(f"soak seed {seed}", flush=True)
    workdir = args.workdir or tempfile.mkdtemp(prefix=f"fmq-soak-{seed}-")
    os.makedirs(workdir, exist_ok=True)
    soak = Soak(seed, workdir, args.fresh_every, args.twice_every, args.verbose,
                args.power_every)
    deadline = time.monotonic() + args.minutes * 60
    t0 = time.monotonic()
    i = args.start - args.start % args.fresh_every
    status = 0
    while True:
        if args.iterations and i >= args.iterations:
            break
        if not args.iterations and time.monotonic() >= deadline:
            break
        try:
            line = soak.iteration(i)
        except Exception:  # noqa: BLE001 - report with the replay command
            traceback.print_exc()
            print(f"FAILED at iteration {i}; replay with: python -m tests.faults.soak "
                  f"--seed {seed} --start {i} --iterations {i + 1} --keep  (work dir "
                  f"{workdir})", flush=True)
            status = 1
            break
        if args.verbose:
            print(f"[{i}] {line}", flush=True)
        i += 1
        soak.iterations += 1
    minutes = (time.monotonic() - t0) / 60
    print(f"soak seed {seed}: {soak.iterations} iterations in {minutes:.1f} min, "
          f"{soak.crashes} crashes (SIGKILL) and {soak.power_cuts} power cuts survived, "
          f"{soak.completed} runs completed "
          f"(killed at the end), {soak.records_checked} recovered records checked"
          + ("" if status == 0 else ", FAILED"), flush=True)
    if not args.keep and status == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
