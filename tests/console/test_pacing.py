"""The console's pace (fmq/console/pacing.py): a burst answered at once, then one request
per interval, and a request that would wait too long refused instead of queued."""

from __future__ import annotations

import pytest

from fmq.console.pacing import MAX_WAIT_S, Pacer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_at_once_then_one_request_per_interval():
    clock = Clock()
    pacer = Pacer(per_s=10, burst=3, clock=clock)
    assert [pacer.delay() for _ in range(3)] == [0, 0, 0]
    assert [pacer.delay() for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    clock.now += 10  # a quiet moment fills the bucket again
    assert [pacer.delay() for _ in range(3)] == [0, 0, 0]


def test_a_request_that_would_wait_too_long_is_refused_and_takes_no_turn():
    clock = Clock()
    pacer = Pacer(per_s=10, burst=1, clock=clock)
    waits = [pacer.delay() for _ in range(int(MAX_WAIT_S * 10) + 1)]
    assert waits[-1] == pytest.approx(MAX_WAIT_S)
    assert pacer.delay() is None and pacer.delay() is None
    clock.now += 1  # ten turns later: waiting is possible again, as long as before
    assert pacer.delay() == pytest.approx(MAX_WAIT_S - 1 + 0.1)
