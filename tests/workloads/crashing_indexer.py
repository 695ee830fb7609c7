"""An indexer process (:mod:`fmq.index.indexer_process`) that SIGKILLs itself, or its whole
broker first, at an injected point of its index writes.

A broker runs it instead of the real one when ``ProcessDispatcher.indexer_module`` names
this module (:mod:`tests.workloads.indexer_crash_server` for a real ``fmq server``). The plan
comes in the environment variable :data:`PLAN_ENV` (JSON), which the broker's children
inherit:

* ``point``: ``mid-batch`` (inside the LMDB write transaction, its items put, before the
  commit: LMDB's writer lock dies held), ``after-write`` (the transaction committed, before
  the indexer reports it to the broker), ``between-batches`` (the report written, before
  the next transaction);
* ``nth``: at this child's ``nth`` index transaction that holds queue entries or timers;
* ``kills``: how many children die so, counted in the file ``state`` (one line per kill,
  written before the kill): the children after them run unharmed;
* ``whole``: SIGKILL the broker (the whole server) first, then this process.

Everything else is the real indexer process: its argument parsing, its LMDB environment,
its scan of the segment files, its pipes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from fmq.index import indexer_process
from fmq.index.store import IndexStore

PLAN_ENV = "FMQ_TEST_INDEXER_CRASH"
POINTS = ("mid-batch", "after-write", "between-batches")


def kills_so_far(state: str) -> int:
    try:
        with open(state, encoding="utf-8") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


class Trigger:
    """Counts this child's index transactions with queue entries or timers; kills at the
    ``nth``."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.seen = 0

    def reached(self, entries: list, timers: list) -> None:
        if not entries and not timers:
            return
        self.seen += 1
        if self.seen == self.plan["nth"]:
            self.kill()

    def kill(self) -> None:
        with open(self.plan["state"], "a", encoding="utf-8") as f:
            f.write(json.dumps({"pid": os.getpid(), "point": self.plan["point"]}) + "\n")
        if self.plan.get("whole"):
            os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def arm(plan: dict[str, Any]) -> None:
    if plan["point"] not in POINTS:
        raise ValueError(f"unknown crash point {plan['point']!r}; one of {POINTS}")
    if kills_so_far(plan["state"]) >= plan["kills"]:
        return
    trigger = Trigger(plan)
    point = plan["point"]
    if point == "mid-batch":
        apply_txn = IndexStore._apply_txn

        def dying_apply_txn(self, txn, entries, applied, marks, timers):  # noqa: ANN001, ANN202
            apply_txn(self, txn, entries, applied, marks, timers)
            trigger.reached(entries, timers)

        IndexStore._apply_txn = dying_apply_txn  # type: ignore[method-assign]
    elif point == "after-write":
        apply = IndexStore.apply

        def dying_apply(self, entries, applied, marks=(), timers=()):  # noqa: ANN001, ANN202
            entries, timers = list(entries), list(timers)
            apply(self, entries, applied, marks, timers)
            trigger.reached(entries, timers)

        IndexStore.apply = dying_apply  # type: ignore[method-assign]
    else:
        indexer_apply = indexer_process.Indexer._apply

        def dying_indexer_apply(self, entries, applied, ends, timers):  # noqa: ANN001, ANN202
            indexer_apply(self, entries, applied, ends, timers)  # written and reported
            trigger.reached(entries, timers)

        indexer_process.Indexer._apply = dying_indexer_apply  # type: ignore[method-assign]


def main() -> int:
    text = os.environ.get(PLAN_ENV)
    if text:
        arm(json.loads(text))
    return indexer_process.main()


if __name__ == "__main__":
    sys.exit(main())
