"""Duplicates dropped by the dedup window, as the operator sees them: ``fmq stats`` (text
and JSON) and the Prometheus endpoint of a real server."""

from __future__ import annotations

import json

import pytest

import fmq
from fmq.client import Producer
from tests.server.harness import free_port, run_cli

from .conftest import FAST
from .test_metrics import scrape, value


@pytest.fixture
def metrics_server(start_server):
    port = free_port()
    srv = start_server({**FAST, "server": {**FAST["server"], "metrics_port": port}})
    return srv, port


def test_stats_and_metrics_count_duplicates_dropped(metrics_server):
    srv, port = metrics_server
    assert value(scrape(port), "fmq_duplicates_dropped_total", topic="t") == 0
    with Producer(srv.address) as p:
        msg = fmq.Message("t", b"x", properties={"%msgid": "order-1"})
        first = p.send_message(msg)
        assert [p.send_message(msg) for _ in range(3)] == [first] * 3
        p.send("u", b"plain")
    samples = scrape(port)
    assert value(samples, "fmq_duplicates_dropped_total", topic="t") == 3
    assert value(samples, "fmq_duplicates_dropped_total", topic="u") == 0
    assert value(samples, "fmq_dedup_message_ids") == 1
    assert value(samples, "fmq_dedup_producers") == 1  # the Producer numbers its sends
    stats = json.loads(run_cli("stats", "--server", srv.address, "--json").stdout)
    assert (stats["duplicates_dropped"], stats["dedup_producers"],
            stats["dedup_message_ids"]) == (3, 1, 1)
    text = run_cli("stats", "--server", srv.address).stdout
    assert "3 duplicates dropped; remembers 1 producer, 1 message id" in text
