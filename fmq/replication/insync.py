"""The primary's view of its followers: how far each holds the log durably, which of them
are in sync, and the wait of a ``sync`` acknowledgement.

A follower reports its durable offset with every fetch (it fetches again only after it
fdatasync'd what it got). It has *caught up* when a report reaches the primary's durable
end as it was at its previous report (Kafka's rule: under steady writes the end moves on,
but a follower that keeps up holds, at each fetch, everything there was at the last one).
It is *in sync* while it caught up within ``max_lag_ms`` and is at most ``max_lag_bytes``
behind; it leaves the set when either is exceeded (a silent or slow follower, one far
behind) and rejoins once it has caught up again. :meth:`ReplicaSet.wait_replicated`
waits for one offset, so one follower report releases every request of every flush below
it: group commit covers replication too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from fmq.errors import NotEnoughReplicas

#: How often a waiting acknowledgement looks again whether its followers are still in
#: sync (a follower that stopped reporting drops out only by the clock).
RECHECK_S = 0.05


@dataclass
class FollowerState:
    name: str
    peer: str
    durable: int
    last_report: float  # monotonic seconds
    end_at_last_report: int  # the primary's durable end when it last reported
    caught_up_at: float = float("-inf")  # when a report last reached that end
    fetches: int = 0


class ReplicaSet:
    """Followers by name (their own listening address), as their fetches report them."""

    def __init__(self, durable_end: Callable[[], int], min_insync: int, max_lag_bytes: int,
                 max_lag_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._durable_end = durable_end
        self.min_insync = min_insync
        self.max_lag_bytes = max_lag_bytes
        self.max_lag_s = max_lag_ms / 1000.0
        self._clock = clock
        self._cond = threading.Condition()
        self._followers: dict[str, FollowerState] = {}
        self.refused = 0  # acknowledgements refused with NotEnoughReplicas

    def report(self, name: str, peer: str, durable: int) -> None:
        """A fetch from ``name``: it holds the log durably below ``durable``."""
        end, now = self._durable_end(), self._clock()
        with self._cond:
            state = self._followers.get(name)
            if state is None:
                state = self._followers[name] = FollowerState(name, peer, durable, now, end)
            if durable >= state.end_at_last_report:
                state.caught_up_at = now
            state.peer, state.durable, state.last_report = peer, durable, now
            state.end_at_last_report = end
            state.fetches += 1
            self._cond.notify_all()

    def _in_sync(self, state: FollowerState, end: int, now: float) -> bool:
        return (end - state.durable <= self.max_lag_bytes
                and now - state.caught_up_at <= self.max_lag_s)

    def in_sync(self) -> list[str]:
        """Names of the followers in sync now."""
        end, now = self._durable_end(), self._clock()
        with self._cond:
            return sorted(s.name for s in self._followers.values()
                          if self._in_sync(s, end, now))

    def wait_replicated(self, offset: int) -> None:
        """Return once ``min_insync`` in-sync followers hold the log below ``offset``.

        Raises NotEnoughReplicas as soon as fewer than ``min_insync`` followers are in
        sync (a follower that stops reporting drops out after ``max_lag_ms``)."""
        with self._cond:
            while True:
                end, now = self._durable_end(), self._clock()
                live = [s for s in self._followers.values() if self._in_sync(s, end, now)]
                if sum(s.durable >= offset for s in live) >= self.min_insync:
                    return
                if len(live) < self.min_insync:
                    self.refused += 1
                    raise NotEnoughReplicas(len(live), self.min_insync)
                self._cond.wait(RECHECK_S)

    def replicated_end(self) -> int | None:
        """The offset below which ``min_insync`` followers hold the log durably (None:
        fewer followers than that ever reported). A durable offset is a fact about the
        follower's disk whether or not it is in sync now, so every report counts."""
        with self._cond:
            durable = sorted((s.durable for s in self._followers.values()), reverse=True)
        if len(durable) < self.min_insync:
            return None
        return durable[self.min_insync - 1] if self.min_insync else self._durable_end()

    def describe(self) -> dict:
        """Each follower's durable offset, lag and whether it is in sync (REPL_STATUS)."""
        end, now = self._durable_end(), self._clock()
        with self._cond:
            followers = [{"name": s.name, "peer": s.peer, "durable_offset": s.durable,
                          "lag_bytes": max(0, end - s.durable),
                          "last_report_ms": int((now - s.last_report) * 1000),
                          "caught_up_ms": (int((now - s.caught_up_at) * 1000)
                                           if s.caught_up_at > float("-inf") else None),
                          "fetches": s.fetches, "in_sync": self._in_sync(s, end, now)}
                         for s in sorted(self._followers.values(), key=lambda s: s.name)]
        return {"durable_end": end, "min_insync": self.min_insync, "followers": followers,
                "in_sync": [f["name"] for f in followers if f["in_sync"]],
                "not_enough_replicas": self.refused}
