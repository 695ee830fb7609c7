"""One session's account in the server's reply budget: the bytes its running requests
reserved for their answers, and the answer bytes its socket has not taken yet.

A request reserves its answer before it reads anything (waiting for room when the budget is
full); once the answer is written, what the transport still holds stays counted until the
peer reads it. The session's write time-out looks at :attr:`ReplyAccount.drained_at`.

A request waiting for room is like a pull long poll: when the server stops it is answered
ServerBusy at once (:meth:`ReplyAccount.stop_waiting`), so a peer that reads none of its
answers does not hold up a graceful stop for shutdown_grace_ms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Protocol

from fmq.errors import ConnectionLost, ServerBusy
from fmq.server.net.budgets import Share


class ReplyAccount:
    """Reply bytes of one session. Reservations are per request: the running task's."""

    def __init__(self, share: Share, loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
        self.share = share
        self._loop = loop
        self.unsent = 0  # reply bytes the transport holds (as of the last look)
        self.drained_at = loop().time()  # when unsent reply bytes last went down
        self._reserved: dict[asyncio.Future, int] = {}  # reply bytes per running request
        self._waits: set[asyncio.Future] = set()
        self._stopping = False  # the server stops: no request waits for room any more

    async def reserve(self, want: int, minimum: int) -> int:
        """Take between ``minimum`` and ``want`` reply bytes for the running request
        (waiting for room); they are released when its reply is written."""
        share = self.share
        budget = share.budget
        n = budget.try_take(share, minimum, want)
        if not n and self._stopping:
            raise _shutting_down()
        if not n:
            fut = self._loop().create_future()

            def grant(k: int) -> None:
                if fut.done():  # the request was cancelled meanwhile
                    budget.release(share, k)
                else:
                    fut.set_result(k)

            waiter = budget.wait(share, minimum, want, grant)
            self._waits.add(fut)
            try:
                n = await fut
            except BaseException:
                budget.cancel(waiter)
                raise
            finally:
                self._waits.discard(fut)
        # The loop named: current_task() looks it up with a getpid system call each time
        # (CPython 3.11), twice a request.
        task = asyncio.current_task(self._loop())
        self._reserved[task] = self._reserved.get(task, 0) + n
        return n

    def unreserve(self, n: int) -> None:
        """Give back reply bytes of the running request it will not use."""
        task = asyncio.current_task(self._loop())
        self._reserved[task] -= n
        self.release(n)

    def take_reservation(self, request: asyncio.Future) -> int:
        """What ``request`` reserved, now handed over to its answer."""
        return self._reserved.pop(request, 0)

    def settle(self, request: asyncio.Future) -> None:
        """``request`` ended: give back what it still holds."""
        if self._reserved:
            self.release(self._reserved.pop(request, 0))

    def release(self, n: int) -> None:
        if n:
            self.share.budget.release(self.share, n)

    def sync_unsent(self, size: int, reserved: int = 0) -> None:
        """The transport now holds ``size`` bytes: count them against the budget;
        ``reserved`` bytes reserved for the reply just written move over to them."""
        delta = size - self.unsent
        if delta > 0 and not self.unsent or delta < 0:
            self.drained_at = self._loop().time()
        self.unsent = size
        net = delta - reserved
        if net > 0:
            self.share.budget.take(self.share, net)
        else:
            self.share.budget.release(self.share, -net)

    def stop_waiting(self) -> int:
        """The server stops: answer the requests waiting for room ServerBusy now, and let
        none wait from now on; returns how many waited."""
        self._stopping = True
        waiting = [fut for fut in self._waits if not fut.done()]
        for fut in waiting:
            fut.set_exception(_shutting_down())
        return len(waiting)

    def close(self) -> None:
        """The socket is gone: give back the unsent bytes, and fail requests waiting for
        room. Requests still running release their reservations when they end."""
        self.release(self.unsent)
        self.unsent = 0
        self.share.budget.cancel_share(self.share)
        for fut in list(self._waits):
            if not fut.done():
                fut.set_exception(ConnectionLost("the connection closed while the request "
                                                 "waited for the reply budget"))


class Reserves(Protocol):
    """Where the running request takes reply bytes and gives them back (its session)."""

    def reserve_reply(self, want: int, minimum: int) -> Awaitable[int]: ...

    def unreserve_reply(self, n: int) -> None: ...


class ReplyRoom:
    """Reply bytes a request reserves for its answer before it reads anything, as an
    ``async with`` block: what the block did not :meth:`keep` for the answer goes back
    when it ends, however it ends (a retry with more room, a long poll's wait, a failure)."""

    __slots__ = ("_session", "_want", "_minimum", "granted", "_kept")

    def __init__(self, session: Reserves, want: int, minimum: int) -> None:
        self._session = session
        self._want = want
        self._minimum = minimum
        self.granted = 0  # between minimum and want, once the block is entered
        self._kept = 0

    def keep(self, n: int) -> None:
        """Hold ``n`` of the granted bytes until the answer is written."""
        self._kept = n

    async def __aenter__(self) -> ReplyRoom:
        self.granted = await self._session.reserve_reply(self._want, self._minimum)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        kept = self._kept if exc_type is None else 0
        self._session.unreserve_reply(self.granted - kept)


def _shutting_down() -> ServerBusy:
    return ServerBusy("the server is shutting down; retry against the restarted server")
