"""How fast the console answers: at most :data:`REQUESTS_PER_S` requests a second (with a
burst of :data:`BURST`), the rest wait their turn.

The console shares the server's process, so whatever it computes holds the same
interpreter lock as the send path; worse, each time the server's loop lets the lock go
(at every socket call) a busy console thread takes it, and the loop waits up to a switch
interval to get it back. A script fetching pages back to back cost more than half of the
send rate even once each page was cheap (docs/performance.md, *The console*). A person
loading a page (its HTML, style sheet and icon) never notices the limit; a scraper is
slowed to it. A request that would wait more than :data:`MAX_WAIT_S` is answered 503.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Requests answered per second at most, over every browser.
REQUESTS_PER_S = 20.0
#: Requests answered at once after a quiet moment.
BURST = 20
#: Longest a request waits for its turn before it is refused (503).
MAX_WAIT_S = 10.0


class Pacer:
    """A token bucket: :meth:`delay` says how long a new request waits for its turn."""

    def __init__(self, per_s: float = REQUESTS_PER_S, burst: int = BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = 1.0 / per_s
        self.burst = burst
        self.clock = clock
        #: When the bucket is full again if nobody else comes (a full bucket: in the past).
        self._full_at = clock()

    def delay(self) -> float | None:
        """Seconds the request waits (0: at once), its turn taken; None: it would wait
        more than MAX_WAIT_S, and takes no turn."""
        now = self.clock()
        full_at = max(self._full_at, now)
        wait = full_at + self.interval - now - self.burst * self.interval
        if wait > MAX_WAIT_S:
            return None
        self._full_at = full_at + self.interval
        return max(0.0, wait)
