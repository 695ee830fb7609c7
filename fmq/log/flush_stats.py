"""Latency and size of group-commit flushes, as fixed-bucket histograms (the metrics read
them; one flush adds one observation, a few integer additions under a lock)."""

from __future__ import annotations

import bisect
import threading
from typing import NamedTuple

#: Upper bounds, in seconds, of the flush latency buckets (write + fdatasync).
SECONDS_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: Upper bounds, in bytes, of the group-commit batch size buckets.
BYTES_BUCKETS = tuple(256 * 4**i for i in range(10))  # 256 B .. 64 MiB


class Histogram(NamedTuple):
    """Counts per bucket (the last one is +Inf), not cumulative, and the sum."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float


class FlushStats:
    """Histograms of the synchronous flushes of one log. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds = [0] * (len(SECONDS_BUCKETS) + 1)
        self._bytes = [0] * (len(BYTES_BUCKETS) + 1)
        self._seconds_sum = 0.0
        self._bytes_sum = 0

    def observe(self, seconds: float, nbytes: int) -> None:
        """One flush took ``seconds`` and made ``nbytes`` durable."""
        with self._lock:
            self._seconds[bisect.bisect_left(SECONDS_BUCKETS, seconds)] += 1
            self._bytes[bisect.bisect_left(BYTES_BUCKETS, nbytes)] += 1
            self._seconds_sum += seconds
            self._bytes_sum += nbytes

    def snapshot(self) -> tuple[Histogram, Histogram]:
        """(latency in seconds, batch size in bytes), copied."""
        with self._lock:
            return (Histogram(SECONDS_BUCKETS, tuple(self._seconds), self._seconds_sum),
                    Histogram(BYTES_BUCKETS, tuple(self._bytes), float(self._bytes_sum)))
