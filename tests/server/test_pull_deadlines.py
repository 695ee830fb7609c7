"""The long polls' deadlines on one timer (fmq.server.ops.pull_deadlines): never called
before a deadline, at most a tick and a millisecond after it (plus the loop's delay), not
at all once removed, and one timer for many waits, on asyncio's loop and on uvloop's."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

import pytest

from fmq.server.ops.pull_deadlines import TICK_S, PullDeadlines, tick_of

try:
    import uvloop
except ImportError:  # pragma: no cover - the bench extra installs it
    uvloop = None

LOOPS = ["asyncio", pytest.param("uvloop", marks=pytest.mark.skipif(
    uvloop is None, reason="uvloop is not installed"))]


def _run(kind: str, main: Callable[[], object]) -> None:
    if kind == "uvloop":
        uvloop.run(main())
    else:
        asyncio.run(main())


#: The loop's own delay allowed beyond the documented bound (a shared, loaded machine).
SLACK_S = 0.5


@pytest.mark.parametrize("kind", LOOPS)
def test_each_waiter_is_called_once_after_its_deadline_within_a_tick(kind):
    async def main() -> None:
        loop = asyncio.get_running_loop()
        d = PullDeadlines()
        calls: list[tuple[int, float]] = []
        start = loop.time()
        deadlines = [start + s for s in (0.005, 0.05, 0.013, 0.05, 0.1, 0.0, -1.0)]
        for i, deadline in enumerate(deadlines):
            d.add(loop, deadline, lambda i=i: calls.append((i, loop.time())))
        while len(calls) < len(deadlines):
            await asyncio.sleep(0.01)
            assert loop.time() - start < 5, "a waiter was never called"
        await asyncio.sleep(0.05)
        assert sorted(i for i, _ in calls) == list(range(len(deadlines)))  # each once
        for i, at in calls:
            assert at > deadlines[i], "called before its deadline"
            # (one past already: called as soon as the loop comes round)
            assert at - max(deadlines[i], start) < TICK_S + 0.001 + SLACK_S
        # In the order of their deadlines' ticks, and of their adding within one.
        order = [i for i, _ in calls]
        assert order == sorted(order, key=lambda i: (tick_of(deadlines[i]), i))
        assert len(d) == 0 and not d.armed
    _run(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_removed_waiter_is_not_called_and_empty_ticks_leave_no_timer(kind):
    async def main() -> None:
        loop = asyncio.get_running_loop()
        d = PullDeadlines()
        called: list[str] = []
        now = loop.time()
        early = d.add(loop, now + 0.02, lambda: called.append("early"))
        d.add(loop, now + 0.06, lambda: called.append("kept"))
        gone = lambda: called.append("gone")  # noqa: E731
        d.add(loop, now + 0.04, gone).pop(gone, None)
        early.pop(called.append, None)  # another callback: nothing removed
        assert len(d) == 2
        await asyncio.sleep(0.2)
        assert called == ["early", "kept"]
        assert not d.armed
    _run(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_many_waits_share_one_timer(kind):
    # What the module is for: a wait arms no timer of its own. Counted by the loop's own
    # call_at, on the same loop.
    async def main() -> None:
        loop = asyncio.get_running_loop()
        armed = 0
        call_at = loop.call_at

        class Counting:
            def call_at(self, when, cb):
                nonlocal armed
                armed += 1
                return call_at(when, cb)

            def time(self):
                return loop.time()

        counting = Counting()
        d = PullDeadlines()
        called = []
        start = loop.time()
        for i in range(200):  # later deadlines, one per waiter, as long polls come in
            cb = functools.partial(called.append, i)
            bucket = d.add(counting, start + 0.05 + i * 0.0005, cb)
            if i % 2:  # ended early, by data
                bucket.pop(cb, None)
        assert armed == 1
        while len(called) < 100:
            await asyncio.sleep(0.01)
            assert loop.time() - start < 5
        await asyncio.sleep(0.02)
        assert called == list(range(0, 200, 2))
        # The timer fired per tick that still held a waiter: 0.1 s of deadlines, 10 ticks.
        assert armed <= 0.1 / TICK_S + 2
    _run(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_an_earlier_deadline_rearms_and_a_waiter_may_add_another(kind):
    async def main() -> None:
        loop = asyncio.get_running_loop()
        d = PullDeadlines()
        calls: list[str] = []
        now = loop.time()
        d.add(loop, now + 1.0, lambda: calls.append("late"))

        def again() -> None:  # a pull woken by its deadline that waits once more
            calls.append("first")
            d.add(loop, loop.time() + 0.02, lambda: calls.append("second"))

        d.add(loop, now + 0.01, again)
        await asyncio.sleep(0.2)
        assert calls == ["first", "second"]
        assert d.armed and len(d) == 1
        await asyncio.sleep(1.0)
        assert calls == ["first", "second", "late"]
    _run(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_waiter_that_ends_another_of_its_tick_leaves_it_uncalled(kind):
    # A session's close, say, run by the first time-out of a tick, ends its other waits.
    async def main() -> None:
        loop = asyncio.get_running_loop()
        d = PullDeadlines()
        calls: list[str] = []
        at = loop.time() + 0.02
        second = lambda: calls.append("second")  # noqa: E731
        bucket = d.add(loop, at, lambda: calls.append("first") or bucket.pop(second, None))
        assert d.add(loop, at, second) is bucket
        await asyncio.sleep(0.2)
        assert calls == ["first"]
    _run(kind, main)


def test_a_tick_begins_after_its_deadline():
    # int(t * 100) is monotonic in t, so the clock past a tick's start is past the deadline.
    for t in (0.0, 0.01, 0.3, 0.29999999999999999, 12345.67, 1e6 + 0.005, 98765.4321):
        tick = tick_of(t)
        assert tick > t * 100
        assert (tick - 1) <= t * 100
