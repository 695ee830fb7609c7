"""Pull long polls' wake-ups (fmq.server.ops.wakeups): what ends a wait, and what a wait
costs the event loop (one future, no tasks, no timer of its own)."""

from __future__ import annotations

import asyncio

from fmq.server.ops.wakeups import PullWakeups


async def _waiting(wakeups: PullWakeups, queue: int, session: int,
                   timeout: float = 10.0) -> asyncio.Task:
    """A long poll of queue ``t``/``queue`` by ``session``, waiting once this returns."""
    events = wakeups.events("t", queue, session)
    task = asyncio.ensure_future(wakeups.wait(events, timeout))
    for _ in range(10):  # until it waits
        await asyncio.sleep(0)
        if wakeups.waiting:
            break
    return task


def test_a_write_to_its_queue_wakes_a_long_poll_and_no_other():
    async def run() -> None:
        w = PullWakeups()
        mine, other = await _waiting(w, 0, 1), await _waiting(w, 1, 2)
        w.data_arrived({("t", 0)})
        assert await asyncio.wait_for(mine, 5) is True
        await asyncio.sleep(0.01)
        assert not other.done()
        w.session_closed(2)  # ends the other one's wait: no data, False
        assert await asyncio.wait_for(other, 5) is False
        assert w.waiting == 0
    asyncio.run(run())


def test_a_write_before_the_wait_is_not_missed():
    # The events are taken before the read: a write landing between the read and the
    # wait ends the wait at once.
    async def run() -> None:
        w = PullWakeups()
        events = w.events("t", 0, 1)
        w.data_arrived({("t", 0)})
        assert await asyncio.wait_for(w.wait(events, 10.0), 5) is True
    asyncio.run(run())


def test_the_time_out_and_wake_all_end_a_wait_without_data():
    async def run() -> None:
        w = PullWakeups()
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert await w.wait(w.events("t", 0, 1), 0.05) is False
        assert 0.04 <= loop.time() - start < 5
        waiting = await _waiting(w, 0, 1)
        w.wake_all()  # the server stops (the context answers "not woken" then)
        await asyncio.wait_for(waiting, 5)
    asyncio.run(run())


def test_a_waiting_long_poll_runs_no_task_of_its_own_and_leaves_nothing_behind():
    # Before, each wait ran two tasks (one per event) under asyncio.wait and cancelled
    # them after: about twice the event loop's work of the whole wait.
    async def run() -> None:
        w = PullWakeups()
        before = len(asyncio.all_tasks())
        waiting = await _waiting(w, 0, 1)
        assert len(asyncio.all_tasks()) == before + 1  # the waiting request's own
        waiting.cancel()  # the request ends another way: its callbacks go with it
        await asyncio.gather(waiting, return_exceptions=True)
        qev, sev = w.events("t", 0, 1)
        assert (qev._wake, sev._wake) == ([], [])
        assert w.waiting == 0
    asyncio.run(run())


def test_only_writes_to_a_waited_queue_are_wanted():
    # The index's thread asks before it wakes the event loop: a write to queues no pull
    # waits for carries no work for it.
    async def run() -> None:
        w = PullWakeups()
        assert not w.wanted({("t", 0)})
        waiting = await _waiting(w, 0, 1)
        assert not w.wanted({("t", 1), ("u", 0)})
        assert w.wanted({("t", 1), ("t", 0)})
        w.data_arrived({("t", 0)})
        assert not w.wanted({("t", 0)})  # woken: nobody waits there any more
        await asyncio.wait_for(waiting, 5)
    asyncio.run(run())


def test_waits_arm_no_timer_each():
    # Their deadlines share one timer (pull_deadlines); before, each wait armed its own.
    # asyncio's loop lists its armed timers (``_scheduled``).
    async def run() -> None:
        w = PullWakeups()
        loop = asyncio.get_running_loop()
        before = len(loop._scheduled)
        waits = [await _waiting(w, q % 4, q) for q in range(50)]
        assert w.waiting == 50
        assert len(loop._scheduled) == before + 1
        w.data_arrived({("t", q) for q in range(4)})
        assert await asyncio.gather(*waits) == [True] * 50
        assert len(w.deadlines) == 0
    asyncio.run(run())
