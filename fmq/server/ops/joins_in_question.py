"""Joins that would start a consumer group here, counted while the other protocol's side is
asked whether it has live members of the group (one protocol per group across broker
groups, docs/kafka.md): both FMQ's gate and the Kafka coordinator count them as live
members meanwhile, so of two joins of the two protocols crossing each other, at least one
sees the other."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class JoinsInQuestion:
    """How many joins of each group are being asked about now."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def count(self, group: str) -> int:
        return self._counts.get(group, 0)

    @contextmanager
    def asking(self, group: str) -> Iterator[None]:
        """Count one join of ``group`` for as long as the block runs."""
        self._counts[group] = self._counts.get(group, 0) + 1
        try:
            yield
        finally:
            left = self._counts[group] - 1
            if left:
                self._counts[group] = left
            else:
                del self._counts[group]
