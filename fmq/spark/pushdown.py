"""Filters Spark pushes into ``spark.read.format("fmq")`` (``DataSourceReader.pushFilters``,
Spark 4.1 and later): which ones the source takes, and how it applies them.

Taken (ANDed; anything else stays with Spark):

* ``type`` and ``topic``: ``=`` and ``IN``: rows of other types or topics are dropped
  before their bodies are copied;
* ``offset``: ``=``, ``<``, ``<=``, ``>``, ``>=``: whole segments outside the range are not
  read at all (by their base offsets), rows outside it are dropped;
* ``store_time``: ``=``, ``<``, ``<=``, ``>``, ``>=``: rows outside the range are dropped
  before their bodies are copied.

A row is kept exactly when Spark would keep it: a damage row has a null type, topic and
store time, so a filter on those drops it, as the same ``where`` in Spark would. Damage in
a segment an offset range skips is not looked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

_RANGE_COLUMNS = ("offset", "store_time")
_SET_COLUMNS = ("type", "topic")
_INT64_MAX = 2**63 - 1


@dataclass
class Range:
    """Inclusive bounds of one integer column."""

    low: int = -(2**63)
    high: int = _INT64_MAX

    def narrow(self, f: Filter) -> bool:
        value = getattr(f, "value", None)
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        if isinstance(f, EqualTo):
            self.low, self.high = max(self.low, value), min(self.high, value)
        elif isinstance(f, GreaterThan):
            self.low = max(self.low, value + 1)
        elif isinstance(f, GreaterThanOrEqual):
            self.low = max(self.low, value)
        elif isinstance(f, LessThan):
            self.high = min(self.high, value - 1)
        elif isinstance(f, LessThanOrEqual):
            self.high = min(self.high, value)
        else:
            return False
        return True


@dataclass
class PushedFilters:
    """The filters the source took, as sets of allowed values and inclusive ranges."""

    sets: dict[str, frozenset[str]] = field(default_factory=dict)
    ranges: dict[str, Range] = field(default_factory=dict)

    def take(self, f: Filter) -> bool:
        """Take ``f`` if the source can apply it; False leaves it to Spark."""
        if len(f.attribute) != 1:
            return False
        column = f.attribute[0]
        if column in _SET_COLUMNS:
            if isinstance(f, EqualTo) and isinstance(f.value, str):
                values = frozenset([f.value])
            elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                values = frozenset(f.value)
            else:
                return False
            self.sets[column] = self.sets.get(column, values) & values
            return True
        if column in _RANGE_COLUMNS:
            bounds = self.ranges.get(column, Range())
            if not bounds.narrow(f):
                return False
            self.ranges[column] = bounds
            return True
        return False

    @property
    def active(self) -> bool:
        return bool(self.sets or self.ranges)

    def wants_segment(self, base: int, end: int) -> bool:
        """Can the segment holding log offsets ``[base, end)`` hold a row that passes?"""
        bounds = self.ranges.get("offset")
        return bounds is None or (base <= bounds.high and end > bounds.low)

    def mask(self, columns: dict[str, pa.Array]) -> np.ndarray:
        """The rows of ``columns`` (name → Arrow array) that pass every filter taken."""
        keep = np.ones(len(next(iter(columns.values()))), dtype=bool)
        for column, values in self.sets.items():
            hit = pc.is_in(columns[column], pa.array(sorted(values), pa.string()))
            keep &= hit.fill_null(False).to_numpy(zero_copy_only=False)
        for column, bounds in self.ranges.items():
            arr = columns[column]
            inside = pc.and_(pc.greater_equal(arr, bounds.low), pc.less_equal(arr, bounds.high))
            keep &= inside.fill_null(False).to_numpy(zero_copy_only=False)
        return keep
