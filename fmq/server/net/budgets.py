"""Byte budgets the server shares between connections.

A :class:`SharedBudget` counts bytes held against two limits: one per connection (its
:class:`Share`) and one in total. The server has two: request bytes (frames being received
and requests running) and reply bytes (replies being built and replies written but not yet
taken by the peer). A caller that does not fit waits in a first-in, first-out queue and is
called back when bytes are released; a waiter held up by the *total* keeps everyone behind it
waiting (so a large request is not starved by a stream of small ones), a waiter held up only
by its *own connection's* limit does not hold up other connections.

Event-loop thread only: nothing here is locked.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

Grant = Callable[[int], None]


class Share:
    """One connection's part of a :class:`SharedBudget`."""

    __slots__ = ("budget", "used")

    def __init__(self, budget: SharedBudget) -> None:
        self.budget = budget
        self.used = 0

    def room(self) -> int:
        """Bytes this connection could take now (own limit and total)."""
        b = self.budget
        return min(b.per_connection - self.used, b.total - b.used)


class _Waiter:
    __slots__ = ("share", "minimum", "want", "grant")

    def __init__(self, share: Share, minimum: int, want: int, grant: Grant) -> None:
        self.share = share
        self.minimum = minimum
        self.want = want
        self.grant = grant


class SharedBudget:
    def __init__(self, name: str, total: int, per_connection: int) -> None:
        self.name = name
        self.total = total
        self.per_connection = per_connection
        self.used = 0
        #: Highest ``used`` seen: what the statistics and the tests compare with the limit.
        self.peak = 0
        self._queue: deque[_Waiter] = deque()
        self._total_blocked = False  # the head of the queue waits for the total

    def share(self) -> Share:
        return Share(self)

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def take(self, share: Share, n: int) -> None:
        """Count ``n`` bytes whatever the limits (bytes that already exist, e.g. a reply
        the socket did not take at once)."""
        share.used += n
        self.used += n
        if self.used > self.peak:
            self.peak = self.used

    def release(self, share: Share, n: int) -> None:
        if n <= 0:
            return
        share.used -= n
        self.used -= n
        if self._queue:
            self._wake()

    def try_take(self, share: Share, minimum: int, want: int) -> int:
        """Take between ``minimum`` and ``want`` bytes now if they fit and nobody waits
        for the total; 0 when the caller has to :meth:`wait`."""
        # Every request frame passes here: plain arithmetic, no calls.
        if self._total_blocked:
            return 0
        room = self.per_connection - share.used
        total_room = self.total - self.used
        if total_room < room:
            room = total_room
        if room < minimum:
            return 0
        n = want if want < room else room
        share.used += n
        used = self.used = self.used + n
        if used > self.peak:
            self.peak = used
        return n

    def room_now(self, share: Share) -> int:
        """The most :meth:`try_take` would grant ``share`` now (0 while someone waits for
        the total): takes that stay within it, one after the other, all succeed."""
        if self._total_blocked:
            return 0
        room = self.per_connection - share.used
        total_room = self.total - self.used
        if total_room < room:
            room = total_room
        return room if room > 0 else 0

    def wait(self, share: Share, minimum: int, want: int, grant: Grant) -> _Waiter:
        """Queue for between ``minimum`` and ``want`` bytes; ``grant(n)`` runs once they are
        taken (possibly before this returns). Call after :meth:`try_take` failed."""
        waiter = _Waiter(share, minimum, want, grant)
        self._queue.append(waiter)
        self._wake()  # may grant at once: the bytes it waited for were released meanwhile
        return waiter

    def cancel(self, waiter: _Waiter) -> None:
        try:
            self._queue.remove(waiter)
        except ValueError:
            return  # granted already
        self._wake()

    def cancel_share(self, share: Share) -> list[_Waiter]:
        """Remove every waiter of ``share`` (its connection is gone); returns them."""
        gone = [w for w in self._queue if w.share is share]
        for w in gone:
            self._queue.remove(w)
        if gone:
            self._wake()
        return gone

    def _wake(self) -> None:
        granted = []
        blocked = False
        for w in self._queue:
            if self.total - self.used < w.minimum:
                blocked = True
                break  # first come, first served for the total
            room = min(self.per_connection - w.share.used, self.total - self.used)
            if room < w.minimum:
                continue  # its own connection is full: it waits for its own releases
            n = min(w.want, room)
            self.take(w.share, n)
            granted.append((w, n))
        self._total_blocked = blocked
        for w, _n in granted:
            self._queue.remove(w)
        for w, n in granted:
            w.grant(n)
