"""One session's account in the server's request budget: a frame's declared length is taken
before its body is read, and held until its request finishes.

When the budget has no room the session stops reading (``pause``) until the bytes are
granted (``resume``), so a flood of large frames waits in the socket, not in memory. A frame
this small, from a session that holds no other request bytes, never waits: pings,
heartbeats and small sends keep working while large frames fill the budget.

A session that has to log in and has not yet may send nothing larger
(:data:`LOGIN_FRAME_LIMIT`): the log-in's messages are small, and a larger frame announced
before log-in is refused as soon as its length is read, before any of it is buffered.
"""

from __future__ import annotations

from collections.abc import Callable

from fmq.errors import AuthenticationRequired
from fmq.server.net.budgets import Share

#: Frames up to this size skip the total budget when the session holds nothing else; it
#: adds at most this much per session.
SMALL_FRAME = 64 * 1024
#: Largest frame a session may send before it has logged in (on a server with users):
#: HELLO, AUTH_START, AUTH_FINISH and PING carry a few hundred bytes.
LOGIN_FRAME_LIMIT = SMALL_FRAME


class RequestAdmission:
    """Request bytes of one session: the frame being received, and each running request's
    (released by :meth:`release` when it ends)."""

    def __init__(self, share: Share, *, accepting: Callable[[], bool],
                 pause: Callable[[], None], resume: Callable[[], None],
                 logged_in: Callable[[], bool] = lambda: True) -> None:
        self.share = share
        self._accepting = accepting  # False once the session reads no more requests
        #: False while the session has to log in and has not (asked of large frames only).
        self._logged_in = logged_in
        self._pause = pause
        self._resume = resume
        self.receiving = 0  # request bytes admitted for the frame being received
        self._waiter = None  # our place in the budget's queue
        self._granted = 0  # bytes granted while we waited, not yet used

    @property
    def waiting(self) -> bool:
        """Whether the frame at the head of the buffer waits for room in the budget."""
        return self._waiter is not None

    def admit(self, n: int) -> bool:
        """May the frame of ``n`` bytes whose length was just read be received? Raises
        AuthenticationRequired for a frame over :data:`LOGIN_FRAME_LIMIT` before log-in."""
        share = self.share
        budget = share.budget
        if self._granted:
            n, self._granted = self._granted, 0
        elif n <= SMALL_FRAME and share.used == 0:
            budget.take(share, n)
        elif n > LOGIN_FRAME_LIMIT and not self._logged_in():
            raise AuthenticationRequired(
                f"a frame of {n} bytes before log-in: until a connection has logged in it may "
                f"send frames of at most {LOGIN_FRAME_LIMIT} bytes (HELLO, AUTH_START, "
                f"AUTH_FINISH, PING); log in first (FMQ_USER and FMQ_PASSWORD, or --user and "
                f"--password-file; docs/security.md)")
        elif not budget.try_take(share, n, n):
            waiter = budget.wait(share, n, n, self._admitted)
            if not self._granted:  # not granted at once: stop reading until it is
                self._waiter = waiter
                self._pause()
                return False
            n, self._granted = self._granted, 0
        self.receiving += n
        return True

    def room(self) -> int:
        """Bytes the next frames of a read may take at once (the frame decoder counts them
        and gives their sum to :meth:`took`), each admitted exactly as :meth:`admit` would
        admit it. Asked after :meth:`admit` admitted the read's first frame, so this session
        holds bytes and the small-frame rule no longer applies: what is left is
        ``SharedBudget.try_take``'s room. 0 (every frame asked of :meth:`admit`) while a
        grant is pending or a waiter queued, while someone waits for the total, while this
        session holds nothing (the small-frame rule), and before log-in (a frame over
        :data:`LOGIN_FRAME_LIMIT` must be refused)."""
        share = self.share
        if self._granted or self._waiter is not None or share.used == 0 \
                or not self._logged_in():
            return 0
        return share.budget.room_now(share)

    def took(self, n: int) -> None:
        """Frames admitted against :meth:`room` take their ``n`` bytes."""
        self.share.budget.take(self.share, n)
        self.receiving += n

    def _admitted(self, n: int) -> None:
        if not self._accepting():
            self.release(n)
            return
        self._granted = n
        if self._waiter is not None:  # granted later: read on
            self._waiter = None
            self._resume()

    def received(self, size: int) -> None:
        """A whole frame of ``size`` bytes arrived: its request holds them from now on."""
        self.receiving -= size

    def release(self, size: int) -> None:
        self.share.budget.release(self.share, size)

    def close(self) -> None:
        """No more requests will be read (the peer closed, or the socket is gone): give
        back the frame being received and any grant. Call it when the session drops the
        bytes of that frame, so the budget counts only what is really held."""
        if self._waiter is not None:
            self.share.budget.cancel(self._waiter)
            self._waiter = None
        self.release(self.receiving + self._granted)
        self.receiving = self._granted = 0
