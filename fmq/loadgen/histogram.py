"""A latency histogram with log-linear buckets: exact below 256 ns, then 128 buckets per
power of two, so every recorded value is known to within 0.8 %. Histograms of several
connections and processes merge by adding counts, which is how ``fmq bench`` gets exact
percentiles of the whole run without shipping every sample between processes.
"""

from __future__ import annotations

SUB_BITS = 7
_SUB = 1 << SUB_BITS
_MASK = _SUB - 1
_LINEAR = _SUB << 1  # values below this have a bucket each


def bucket_of(value_ns: int) -> int:
    """The bucket index of a non-negative value (nanoseconds)."""
    if value_ns < _LINEAR:
        return max(0, value_ns)
    shift = value_ns.bit_length() - SUB_BITS - 1
    return (shift << SUB_BITS) + (value_ns >> shift)


def bucket_bounds(index: int) -> tuple[int, int]:
    """The smallest and largest value that fall in bucket ``index``."""
    if index < _LINEAR:
        return index, index
    shift = (index >> SUB_BITS) - 1
    top = _SUB + (index & _MASK)
    return top << shift, ((top + 1) << shift) - 1


class Histogram:
    """Counts of values (nanoseconds) by bucket."""

    __slots__ = ("counts", "total", "max_ns")

    def __init__(self, counts: dict[int, int] | None = None, max_ns: int = 0) -> None:
        self.counts: dict[int, int] = dict(counts or {})
        self.total = sum(self.counts.values())
        self.max_ns = max_ns

    def record(self, value_ns: int, count: int = 1) -> None:
        b = bucket_of(value_ns)
        self.counts[b] = self.counts.get(b, 0) + count
        self.total += count
        if value_ns > self.max_ns:
            self.max_ns = value_ns

    def merge(self, other: Histogram) -> None:
        for b, n in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + n
        self.total += other.total
        self.max_ns = max(self.max_ns, other.max_ns)

    def percentile(self, q: float) -> float:
        """The value (ns) at quantile ``q`` in [0, 1]: the middle of the bucket holding the
        ceil(q * total)-th smallest value; the recorded maximum for q = 1; 0 when empty."""
        if not self.total:
            return 0.0
        if q >= 1.0:
            return float(self.max_ns)
        rank = max(1, -(-int(q * self.total * 1_000_000) // 1_000_000))
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                lo, hi = bucket_bounds(b)
                return min((lo + hi) / 2, float(self.max_ns))
        return float(self.max_ns)  # pragma: no cover - rank <= total

    def to_dict(self) -> dict:
        """A picklable, JSON-able form (for the queue between processes)."""
        return {"counts": self.counts, "max_ns": self.max_ns}

    @classmethod
    def from_dict(cls, data: dict) -> Histogram:
        return cls({int(k): v for k, v in data["counts"].items()}, data["max_ns"])
