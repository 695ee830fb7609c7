"""FMQ's retry jitter draws from generators of its own: a client's reconnect back-off and a
node's follower threads (routes, users) never move the process's global ``random`` state,
which an application may have seeded for its own reproducible sequence (and which a
follower thread left running moved under other code's feet: Hypothesis warned of it in the
suite's own runs)."""

from __future__ import annotations

import random

import pytest

from fmq.client.acquire import backoff_delay
from fmq.coordination.etcd_io import retry_delay


@pytest.mark.parametrize("attempt", [0, 1, 5, 30])
def test_the_client_back_off_keeps_the_global_random_state(attempt: int) -> None:
    random.seed(1234)
    before = random.getstate()
    delays = [backoff_delay(attempt, 0.1, 5.0) for _ in range(50)]
    assert random.getstate() == before
    base = min(5.0, 0.1 * 2 ** attempt)
    assert all(base / 2 <= d <= base for d in delays)
    assert len(set(delays)) > 1  # still jittered


def test_the_followers_retry_delay_keeps_the_global_random_state() -> None:
    random.seed(99)
    before = random.getstate()
    delays = [retry_delay(30.0) for _ in range(50)]
    assert random.getstate() == before
    assert all(1.0 <= d <= 2.0 for d in delays) and len(set(delays)) > 1
    assert retry_delay(0.5) == 0.5  # never past the resync period
