"""Wake-ups of pull long polls: a waiting pull costs no thread and no reads, and is woken
only when a write lands in its own queue, its session closes, or the server stops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fmq.server.ops.pull_deadlines import PullDeadlines

Queue = tuple[str, int]


class WakeEvent(asyncio.Event):
    """An :class:`asyncio.Event` that also calls the callbacks registered on it when set:
    :meth:`PullWakeups.wait` waits for the first of two events with one future and no
    tasks (two tasks, ``asyncio.wait`` and two cancellations cost a long poll about as much
    as its read; docs/performance.md, "Readers that cost little"). Others may still await
    :meth:`wait` (the Kafka door's fetch)."""

    __slots__ = ("_wake",)

    def __init__(self) -> None:
        super().__init__()
        self._wake: list[Callable[[], None]] = []

    def set(self) -> None:
        super().set()
        wake, self._wake = self._wake, []
        for cb in wake:
            cb()

    def on_set(self, cb: Callable[[], None]) -> None:
        """Call ``cb()`` when set (at once when it is set already)."""
        if self.is_set():
            cb()
        else:
            self._wake.append(cb)

    def forget(self, cb: Callable[[], None]) -> None:
        """Drop ``cb`` (its waiter ended first)."""
        wake = self._wake
        if cb in wake:  # else called already (a raised ValueError cost a woken wait more)
            wake.remove(cb)


PullEvents = tuple[WakeEvent, WakeEvent]


class PullWakeups:
    """One event per (topic, queue) with waiters (set when a write lands there) and one per
    session (set when it closes); each is dropped once set, and made again by the next
    waiter. The waits' deadlines share one timer (:attr:`deadlines`)."""

    def __init__(self) -> None:
        self._queues: dict[Queue, WakeEvent] = {}
        self._sessions: dict[int, WakeEvent] = {}
        #: When the waits time out: within a tick (``pull_deadlines.TICK_S``) after it.
        self.deadlines = PullDeadlines()
        #: Pull long polls waiting now.
        self.waiting = 0

    def wanted(self, queues: set[Queue]) -> bool:
        """Some pull waits for data in one of ``queues`` (any thread may ask: a wake-up of
        the event loop for the others would carry no work)."""
        waited = self._queues
        return any(q in waited for q in queues) if waited else False

    def data_arrived(self, queues: set[Queue]) -> None:
        """A write completed: wake the pull long polls of ``queues``, and only those."""
        for q in queues:
            ev = self._queues.pop(q, None)
            if ev is not None:
                ev.set()

    def session_closed(self, session_id: int) -> None:
        """Wake the pull long polls of one session."""
        ev = self._sessions.pop(session_id, None)
        if ev is not None:
            ev.set()

    def wake_all(self) -> None:
        """Wake every pull long poll (the server stops)."""
        events = [*self._queues.values(), *self._sessions.values()]
        self._queues.clear()
        self._sessions.clear()
        for ev in events:
            ev.set()

    def events(self, topic: str, queue_id: int, session_id: int) -> PullEvents:
        """The events a pull of ``topic``/``queue_id`` waits on: data in its queue, and its
        session closing. Take them *before* reading the queue, so a write landing between
        the read and the wait is not missed."""
        qev = self._queues.get((topic, queue_id))
        if qev is None:
            qev = self._queues[(topic, queue_id)] = WakeEvent()
        sev = self._sessions.get(session_id)
        if sev is None:
            sev = self._sessions[session_id] = WakeEvent()
        return qev, sev

    async def wait(self, events: PullEvents, timeout: float,
                   loop: asyncio.AbstractEventLoop | None = None) -> bool:
        """Wait until data lands in the queue (True), or the session closes, everything is
        woken or ``timeout`` passes (False; within a tick after it, see
        :mod:`~fmq.server.ops.pull_deadlines`). ``loop``: the running one, named by a
        caller that knows it (finding it costs a getpid system call in CPython 3.11)."""
        qev, sev = events
        woken = (loop or asyncio.get_running_loop()).create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        qev.on_set(wake)
        sev.on_set(wake)
        loop = woken.get_loop()
        bucket = self.deadlines.add(loop, loop.time() + timeout, wake)
        self.waiting += 1
        try:
            await woken
        finally:
            self.waiting -= 1
            bucket.pop(wake, None)
            qev.forget(wake)
            sev.forget(wake)
        return qev.is_set()
