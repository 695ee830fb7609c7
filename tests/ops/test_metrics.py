"""The Prometheus endpoint of a real server: scraped over HTTP, its values move as
messages flow."""

from __future__ import annotations

import os
import re
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import fmq
from fmq.client import Client
from fmq.errors import UnknownQueue
from fmq.protocol import Op
from fmq.protocol.values import message_to_wire
from fmq.server import ServerConfig
from tests.server.harness import free_port

from .conftest import FAST


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def send(c: Client, n: int, body: bytes = b"0123456789") -> None:
    c.call(Op.SEND_BATCH, {"messages": [message_to_wire(fmq.Message("t", body, queue_id=0))
                                        for _ in range(n)]})


@pytest.fixture
def metrics_server(start_server):
    port = free_port()
    srv = start_server({**FAST, "server": {**FAST["server"], "metrics_port": port}})
    return srv, port


def test_metrics_are_off_and_loopback_by_default():
    cfg = ServerConfig()
    assert cfg.metrics_port == 0 and cfg.metrics_host == "127.0.0.1"


def test_traffic_requests_and_errors_move(metrics_server):
    srv, port = metrics_server
    with Client(srv.address, retries=0) as c:
        first = scrape(port)
        assert value(first, "fmq_messages_in_total", topic="t") == 0
        send(c, 5)
        c.call(Op.PULL, {"topic": "t", "queue_id": 0, "offset": 0, "max_messages": 2,
                         "wait_ms": 0})
        with pytest.raises(UnknownQueue):
            c.call(Op.PULL, {"topic": "t", "queue_id": 99, "offset": 0, "max_messages": 1,
                             "wait_ms": 0})
        s = scrape(port)
    assert value(s, "fmq_connections") >= 1
    assert value(s, "fmq_messages_in_total", topic="t") == 5
    assert value(s, "fmq_bytes_in_total", topic="t") == 50
    assert value(s, "fmq_messages_out_total", topic="t") == 2
    assert value(s, "fmq_bytes_out_total", topic="t") == 20
    assert value(s, "fmq_requests_total", op="SEND_BATCH") == 1
    assert value(s, "fmq_requests_total", op="PULL") == 2
    assert value(s, "fmq_request_errors_total", op="PULL", code="12") == 1
    flushes = value(s, "fmq_fsync_seconds_count")
    assert flushes >= 1 and flushes > value(first, "fmq_fsync_seconds_count")
    assert value(s, "fmq_fsync_seconds_bucket", le="+Inf") == flushes
    assert value(s, "fmq_group_commit_bytes_sum") >= value(s, "fmq_log_bytes") > 0
    assert value(s, "fmq_log_segments") >= 1 and value(s, "fmq_log_disk_bytes") > 0
    assert ("fmq_index_lag_bytes", ()) in s and ("fmq_index_lag_seconds", ()) in s


def test_consumer_lag_and_transactions_move(metrics_server):
    srv, port = metrics_server
    with Client(srv.address, retries=0) as c:
        send(c, 4)
        c.call(Op.COMMIT_OFFSET, {"group": "g", "topic": "t", "queue_id": 0, "next_offset": 1})
        time.sleep(0.05)
        s = scrape(port)
        assert value(s, "fmq_consumer_committed_offset", group="g", topic="t", queue="0") == 1
        assert value(s, "fmq_consumer_lag_messages", group="g", topic="t", queue="0") == 3
        assert value(s, "fmq_consumer_lag_seconds", group="g", topic="t", queue="0") > 0
        c.call(Op.COMMIT_OFFSET, {"group": "g", "topic": "t", "queue_id": 0, "next_offset": 4})
        s = scrape(port)
        assert value(s, "fmq_consumer_lag_messages", group="g", topic="t", queue="0") == 0
        assert value(s, "fmq_consumer_lag_seconds", group="g", topic="t", queue="0") == 0

        assert value(s, "fmq_open_transactions") == 0
        tx = c.call(Op.PREPARE, {"producer_group": "pg", "tx_id": None, "messages": [
            message_to_wire(fmq.Message("t", b"tx"))]})["tx_id"]
        time.sleep(0.4)  # past FAST's tx_check_after_ms: a check-back is due
        s = scrape(port)
        assert value(s, "fmq_open_transactions") == 1
        assert value(s, "fmq_oldest_transaction_age_seconds") >= 0.3
        offered = c.call(Op.POLL_UNCERTAIN, {"producer_group": "pg", "max_items": 4,
                                             "lease_ms": 5000, "wait_ms": 2000})
        assert [t["tx_id"] for t in offered["transactions"]] == [tx]
        c.call(Op.ANSWER_UNCERTAIN, {"producer_group": "pg", "tx_id": tx, "state": "commit"})
        s = scrape(port)
    assert value(s, "fmq_open_transactions") == 0
    assert value(s, "fmq_checkbacks_sent_total") >= 1
    assert value(s, "fmq_checkbacks_answered_total") == 1
    assert value(s, "fmq_messages_in_total", topic="t") == 5


def test_every_metric_is_documented(metrics_server):
    srv, port = metrics_server
    with Client(srv.address, retries=0) as c:
        send(c, 1)
        c.call(Op.COMMIT_OFFSET, {"group": "g", "topic": "t", "queue_id": 0, "next_offset": 1})
        names = {name for name, _labels in scrape(port)}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "operations.md"), encoding="utf-8") as f:
        documented = set(re.findall(r"`(fmq_[a-z_]+)`", f.read()))
    base = {re.sub(r"_(bucket|sum|count|created)$", "", n) for n in names}
    assert len(base) > 20
    missing = {n for n in base if n not in documented and n.removesuffix("_total") not in
               {d.removesuffix("_total") for d in documented}}
    assert not missing, f"metrics not listed in docs/operations.md: {sorted(missing)}"


def test_the_metric_names_docs_security_md_gives_are_served(metrics_server):
    # security.md names the counters an operator alerts on: each must be a served sample.
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "security.md"),
              encoding="utf-8") as f:
        named = set(re.findall(r"`(fmq_[a-z_]+)`", f.read()))
    srv, port = metrics_server
    served = {name for name, _labels in scrape(port)}
    assert named and named <= served, named - served
