"""How long a producer keeps retrying: a delivery deadline (Kafka's ``delivery.timeout.ms``)
rather than a count.

A request that fails with a retriable error (fmq/errors marks them: a lost connection, a
time-out, NotPrimary, NotEnoughReplicas, ServerBusy, PrimaryNotFound while an election
runs, ...) is sent again after a back-off, doubling with jitter up to a cap, until
``delivery_timeout`` seconds have passed since it was first handed over. Only a
non-retriable error, or the deadline running out (:class:`~fmq.errors.DeliveryTimeout`
naming the last error), reaches the application. A client built with a count
(``retries=N``) keeps it: then it also stops after N retries, with the last error itself.

A retry must never store a request twice: after a failure that may have stored it
(:func:`may_be_stored`), an idempotent request is sent again exactly as it went (same broker
group, queues, producer id and sequence numbers; a PREPARE with the same transaction id and
messages), so that the server answers it from the copy it stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fmq.errors import (
    ConnectionLost,
    DeliveryTimeout,
    FMQError,
    InvalidArgument,
    LeadershipLost,
    NotEnoughReplicas,
    NotSent,
    RequestTimeout,
)

#: A producer's default: two minutes, as Kafka's ``delivery.timeout.ms``.
DEFAULT_DELIVERY_TIMEOUT = 120.0

#: Retriable failures after which a request that was written may be stored all the same:
#: its answer was lost (ConnectionLost, RequestTimeout), or the server stored it and then
#: did not acknowledge it (NotEnoughReplicas: too few followers copied it; LeadershipLost:
#: the primary could no longer prove it held the group's lease).
MAYBE_STORED = (ConnectionLost, RequestTimeout, NotEnoughReplicas, LeadershipLost)


def may_be_stored(error: BaseException) -> bool:
    """Whether a request that failed with ``error`` after it was handed to its connection
    may be stored (NotSent: it never left the client, so it is not)."""
    return isinstance(error, MAYBE_STORED) and not isinstance(error, NotSent)


def check_retry_options(retries: int | None, delivery_timeout: float | None) -> None:
    """Refuse a negative count, a deadline that is not a positive number of seconds, or
    neither bound (a request retried for ever)."""
    if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int)
                                or retries < 0):
        raise InvalidArgument(f"retries must be a whole number of at least 0 (or None: "
                              f"retry until delivery_timeout), not {retries!r}")
    if delivery_timeout is not None and not delivery_timeout > 0:
        raise InvalidArgument(f"delivery_timeout must be a positive number of seconds, not "
                              f"{delivery_timeout!r}")
    if retries is None and delivery_timeout is None:
        raise InvalidArgument("give retries or delivery_timeout (or both): without either a "
                              "failing request would be retried for ever")


class Attempts:
    """The retries of one request: when it must be answered by, and how many retries are
    left. :meth:`pause` is asked after each failure."""

    __slots__ = ("_backoff", "_retries", "attempt", "deadline", "delivery_timeout")

    def __init__(self, retries: int | None, delivery_timeout: float | None,
                 backoff: Callable[[int], float], started: float | None = None) -> None:
        started = time.monotonic() if started is None else started
        self.delivery_timeout = delivery_timeout
        self.deadline = None if delivery_timeout is None else started + delivery_timeout
        self._retries = retries
        self._backoff = backoff
        #: Retries made so far.
        self.attempt = 0

    def left(self, now: float | None = None) -> float | None:
        """Seconds until the deadline (None: no deadline)."""
        if self.deadline is None:
            return None
        return self.deadline - (time.monotonic() if now is None else now)

    def cap(self, timeout: float) -> float:
        """One attempt's time-out, shortened so that it ends by the deadline."""
        left = self.left()
        return timeout if left is None else max(0.001, min(timeout, left))

    def pause(self, error: BaseException, closed: bool = False,
              now: float | None = None) -> float:
        """After ``error``: the seconds to wait before the next try. Raises ``error`` when
        it is not retriable, the client is ``closed`` or the retries are used up, and
        :class:`DeliveryTimeout` (caused by ``error``) when the deadline is reached."""
        if not isinstance(error, FMQError) or not error.retriable or closed:
            raise error
        if self._retries is not None and self.attempt >= self._retries:
            raise error
        delay = self._backoff(self.attempt)
        left = self.left(now)
        if left is not None and left <= delay:  # no time left for another try
            raise self.expired(error) from error
        self.attempt += 1
        return delay

    def expired(self, error: BaseException) -> DeliveryTimeout:
        return DeliveryTimeout(
            f"not delivered within delivery_timeout ({self.delivery_timeout:g}s) after "
            f"{self.attempt + 1} attempts; the last failed with {type(error).__name__}: "
            f"{error}. It may or may not be stored: raise delivery_timeout to wait out "
            f"longer outages (docs/client.md)", error)
