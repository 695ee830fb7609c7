"""Small operator-facing messages: an unreachable etcd names its cause; one message larger
than a frame is told to send a smaller body (not only smaller batches); an idle broker's
reply-budget peak reads as room reserved; the Spark topic-source example stays on loopback."""

from __future__ import annotations

import os
import re
import tempfile

import pytest

from fmq.client import Producer
from fmq.coordination.broker_group import BrokerGroupRegistry
from fmq.coordination.lease import LeaderLease
from fmq.errors import CoordinatorUnavailable, FMQError
from tests.server.harness import free_port, run_cli

from .conftest import FAST

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_an_unreachable_etcd_is_logged_with_its_cause():
    url = f"etcd://127.0.0.1:{free_port()}"  # nothing listens there: connection refused
    lease = LeaderLease(url, "g", "n1", "127.0.0.1:9000", ttl_s=5, request_timeout_s=1.0)
    with pytest.raises(CoordinatorUnavailable) as info:
        BrokerGroupRegistry(lease, 5).publish(1, 0)
    text = str(info.value)
    assert f"could not grant a report lease at {url}: " in text
    assert ": ." not in text, text
    assert "connection refused (nothing listens at that address)" in text, text


def test_one_message_larger_than_a_frame_is_told_to_send_a_smaller_body(start_server):
    srv = start_server({**FAST, "max_message_size": 64 * 1024,
                        "server": {**FAST["server"], "max_frame_size": 256 * 1024,
                                   "max_reply_size": 256 * 1024}})
    with Producer(srv.address, retries=0) as p, pytest.raises(FMQError) as info:
        p.send("t", b"x" * (300 * 1024))
    text = str(info.value)
    assert "max_frame_size" in text and "smaller body" in text, text
    with tempfile.TemporaryFile("w+") as big:
        big.write("y" * (300 * 1024) + "\n")
        big.seek(0)
        out = run_cli("produce", "--server", srv.address, "--topic", "t",
                      input=big.read())
    assert out.returncode == 1 and "smaller body" in out.stderr, out.stderr


def test_an_idle_broker_s_reply_peak_reads_as_room_reserved(start_server):
    srv = start_server(FAST)
    run_cli("consume", "--server", srv.address, "--topic", "t", "--idle-timeout", "0.3")
    out = run_cli("stats", "--server", srv.address)
    assert out.returncode == 0, out.stderr
    [line] = [line for line in out.stdout.splitlines() if "reply bytes" in line]
    assert "(peak" not in line, line
    assert re.search(r"reply bytes\s+0 B held now, at most .+ reserved at once", line), line


def test_the_spark_topic_source_example_keeps_spark_on_loopback():
    with open(os.path.join(ROOT, "docs", "spark.md"), encoding="utf-8") as f:
        doc = f.read()
    examples = re.findall(r"```python\n(.*?)```", doc, re.S)
    sessions = [e for e in examples if "fmq.spark.topic_source import register" in e]
    assert sessions
    for session in sessions:  # the source's example and the exactly-once pipeline
        local_ip = session.find('"SPARK_LOCAL_IP", "127.0.0.1"')
        assert 0 <= local_ip < session.find("getOrCreate()"), session
