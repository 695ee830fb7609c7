"""The deadlines of waiting pull long polls, on one event-loop timer.

A long poll that finds nothing waits until data lands in its queue, its session closes, the
server stops, or its ``wait_ms`` passes. An event-loop timer armed per wait
(``loop.call_at``: a timer handle, a copy of the context, a libuv timer; then its cancel
when data comes first, as it nearly always does for a consumer following its queue) cost
more than the rest of the wait's bookkeeping. Here a wait's deadline goes into the bucket
of its *tick* (the first multiple of :data:`TICK_S` past it): a dict entry added, and
popped when the wait ends early; one timer runs, armed for the earliest bucket only, and
calls every waiter of each bucket that is due (docs/performance.md, "Readers, fifth
step").

The time-out's bounds: a waiter is called once its tick has begun by the loop's clock, so
never before its deadline (the tick starts after it), and at most :data:`TICK_S` and a
millisecond (:data:`_LATE_S`) after it, plus the event loop's own delay (a busy loop runs a
timer late, as it ran the per-wait one). Ending a wait for data is not delayed at all: that
goes through the wait's events (:mod:`fmq.server.ops.wakeups`), not through here.

Buckets whose waiters all ended early stay, empty, until the timer reaches them (at most
one per tick of the longest wait); the timer skips them and is armed again for the next
bucket that still holds a waiter. So consumers following their queues, whose waits end by
data, arm about one timer per longest wait rather than one per PULL.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable

#: Deadlines share a timer per tick of this many seconds: a long poll's time-out answer
#: comes at most this much after its ``wait_ms``.
_TICKS_PER_S = 100
TICK_S = 1 / _TICKS_PER_S

#: The timer is armed this much after its tick begins: uvloop rounds a delay to whole
#: milliseconds, so a timer armed for the tick's start may fire before it, find nothing
#: due and have to be armed again.
_LATE_S = 0.001


def tick_of(deadline: float) -> int:
    """The tick whose bucket holds a wait ending at ``deadline``: the first that begins
    after it (``int(t * 100)`` is monotonic in ``t``, so a tick begun by the clock,
    ``tick_of(now) > tick``, means ``now > deadline``)."""
    return int(deadline * _TICKS_PER_S) + 1


#: The waiters of one tick: their callbacks, in the order they were added (a dict's order).
Bucket = dict[Callable[[], None], None]


class PullDeadlines:
    """Waiters by tick (event-loop thread only): :meth:`add` a callback to be called once
    its deadline's tick begins; popped from its bucket when its wait ends otherwise."""

    __slots__ = ("_buckets", "_ticks", "_timer", "_armed", "_loop")

    def __init__(self) -> None:
        #: tick -> its waiters.
        self._buckets: dict[int, Bucket] = {}
        #: The ticks of the buckets, a heap: a tick is here exactly while its bucket is.
        self._ticks: list[int] = []
        self._timer: asyncio.TimerHandle | None = None
        self._armed = 0  # the tick the timer is armed for
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, loop: asyncio.AbstractEventLoop, deadline: float,
            cb: Callable[[], None]) -> Bucket:
        """Call ``cb()`` once ``deadline`` (``loop.time()``'s clock) has passed, within a
        tick. Returns its bucket: ``bucket.pop(cb, None)`` forgets it (its wait ended
        before its deadline; a dict's own method, no call of Python code, and harmless
        once the bucket is due)."""
        tick = int(deadline * _TICKS_PER_S) + 1  # tick_of, inline: once per wait
        bucket = self._buckets.get(tick)
        if bucket is None:
            bucket = self._bucket(loop, tick)
        bucket[cb] = None
        return bucket

    def _bucket(self, loop: asyncio.AbstractEventLoop, tick: int) -> Bucket:
        bucket = self._buckets[tick] = {}
        heapq.heappush(self._ticks, tick)
        if self._timer is None or tick < self._armed:
            self._loop = loop
            self._arm(tick)
        return bucket

    def __len__(self) -> int:
        """Waiters in the buckets."""
        return sum(map(len, self._buckets.values()))

    @property
    def armed(self) -> bool:
        """Whether the timer is armed (a test's view)."""
        return self._timer is not None

    def _arm(self, tick: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = tick
        self._timer = self._loop.call_at(tick / _TICKS_PER_S + _LATE_S, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = int(self._loop.time() * _TICKS_PER_S)  # the tick begun last
        ticks, buckets = self._ticks, self._buckets
        due = []
        while ticks and ticks[0] <= now:
            bucket = buckets.pop(heapq.heappop(ticks))
            if bucket:
                due.append(bucket)
        while ticks and not buckets[ticks[0]]:  # every wait of it ended early
            del buckets[heapq.heappop(ticks)]
        if ticks:
            self._arm(ticks[0])
        # Armed first: a callback may add a waiter (a pull that waits again). A callback
        # may also end another wait of its bucket (popped then: not called).
        for bucket in due:
            for cb in list(bucket):
                if bucket.pop(cb, False) is None:
                    cb()
