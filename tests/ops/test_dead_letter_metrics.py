"""Dead letters are not consumer lag: a group's dead-letter topic gets no
``fmq_consumer_lag_*`` series (the documented FmqConsumerLag alert would fire for every dead
letter), and dead letters have their own gauges."""

from __future__ import annotations

import pytest

from tests.server.harness import free_port, run_cli
from tests.server.test_scheduled_and_retries import FAST_RETRIES, _wait_for_dead_letter

from .test_metrics import scrape, value
from .test_reset_offsets_plan import _dead_letter_then_redrive, _fail_until_dead

pytestmark = pytest.mark.timeout(120)


def test_dead_letters_are_not_consumer_lag(start_server):
    port = free_port()
    srv = start_server({**FAST_RETRIES,
                        "server": {**FAST_RETRIES["server"], "metrics_port": port}})
    # Redriven once (the group now has a committed offset in %DLQ%shop), then dead again:
    # one dead letter waits past the group's committed offset there.
    _dead_letter_then_redrive(srv)
    _fail_until_dead(srv)
    _wait_for_dead_letter(srv.address, "shop")
    samples = scrape(port)
    lag_topics = {dict(labels).get("topic") for name, labels in samples
                  if name.startswith("fmq_consumer_lag_")}
    assert "orders" in lag_topics
    assert "%DLQ%shop" not in lag_topics, sorted(lag_topics)
    assert value(samples, "fmq_consumer_committed_offset", group="shop", topic="%DLQ%shop",
                 queue="0") == 1
    assert value(samples, "fmq_group_dead_letters", group="shop") == 1
    assert value(samples, "fmq_group_dead_letter_age_seconds", group="shop") > 0
    out = run_cli("dlq", "redrive", "shop", "--server", srv.address)
    assert out.returncode == 0, out.stderr
    samples = scrape(port)
    assert value(samples, "fmq_group_dead_letters", group="shop") == 0
    assert ("fmq_group_dead_letter_age_seconds", (("group", "shop"),)) in samples
    assert value(samples, "fmq_group_dead_letter_age_seconds", group="shop") == 0
