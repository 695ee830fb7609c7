"""Wake-ups of pull long polls: a waiting pull costs no thread and no reads, and is woken
only when a write lands in its own queue, its session closes, or the server stops."""

from __future__ import annotations

import asyncio

Queue = tuple[str, int]
PullEvents = tuple[asyncio.Event, asyncio.Event]


class PullWakeups:
    """One event per (topic, queue) with waiters (set when a write lands there) and one per
    session (set when it closes); each is dropped once set, and made again by the next
    waiter."""

    def __init__(self) -> None:
        self._queues: dict[Queue, asyncio.Event] = {}
        self._sessions: dict[int, asyncio.Event] = {}
        #: Pull long polls waiting now.
        self.waiting = 0

    @property
    def watched(self) -> bool:
        """Some queue has a pull waiting for data (any thread may ask)."""
        return bool(self._queues)

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
            qev = self._queues[(topic, queue_id)] = asyncio.Event()
        sev = self._sessions.get(session_id)
        if sev is None:
            sev = self._sessions[session_id] = asyncio.Event()
        return qev, sev

    async def wait(self, events: PullEvents, timeout: float) -> bool:
        """Wait until data lands in the queue (True), or the session closes, everything is
        woken or ``timeout`` passes (False)."""
        qev, sev = events
        waits = [asyncio.ensure_future(qev.wait()), asyncio.ensure_future(sev.wait())]
        self.waiting += 1
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.waiting -= 1
            for w in waits:
                w.cancel()
        return qev.is_set()
