"""``--kafka-port`` and the ``kafka_*`` settings: off by default, a clear error for a port
in use, the advertised address, and users arriving while it serves."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from fmq.errors import ConfigError
from fmq.server.config import ServerConfig
from tests.etcdkit import ETCD, EtcdProcess
from tests.replication.cluster import SMALL
from tests.server.harness import (
    FMQ,
    ServerProcess,
    closed_by_server,
    free_port,
    wait_until,
)

from .conftest import KafkaServer
from .wire import exchange, frame_request, recv_frame, request_type


def test_the_kafka_door_is_off_unless_asked_for(tmp_path):
    srv = ServerProcess(str(tmp_path / "data")).start()
    try:
        assert "kafka front door" not in srv.log()
    finally:
        srv.kill()


def test_a_kafka_port_in_use_is_an_error_naming_the_option(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*FMQ, "server", "--data-dir", str(tmp_path / "data"),
                               "--port", str(free_port()), "--kafka-port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--kafka-port" in done.stderr and str(port) in done.stderr
    assert "Traceback" not in done.stderr


def test_the_config_file_sets_the_port_and_the_advertised_address(tmp_path):
    port = free_port()
    srv = ServerProcess(str(tmp_path / "data"), {"server": {
        "kafka_port": port, "kafka_advertised_host": "kafka.example", "kafka_advertised_port": 9092}})
    srv.start()
    try:
        # A bare Metadata exchange: a client would go on to the advertised name, which
        # does not resolve here.
        _, answer = exchange(("127.0.0.1", port), request_type(3, 12)(
            topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [
            (0, "kafka.example", 9092)]
    finally:
        srv.kill()


def test_bad_kafka_settings_are_refused():
    with pytest.raises(ConfigError, match="kafka_port"):
        ServerConfig(kafka_port=70_000)
    with pytest.raises(ConfigError, match="kafka_advertised_port"):
        ServerConfig(kafka_advertised_port=-1)


def test_a_graceful_stop_ends_kafka_long_polls_at_once(kafka_server):
    import time

    from confluent_kafka import Consumer, TopicPartition

    from .test_clients import produce_all

    srv = kafka_server()
    produce_all(srv.bootstrap, "stopping", [(b"k", b"v", [])])
    consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "stop",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 25_000})
    consumer.assign([TopicPartition("stopping", 0, 1)])  # past the end: a long poll
    try:
        assert consumer.poll(1.0) is None
        started = time.monotonic()
        assert srv.stop(timeout=30) == 0
        assert time.monotonic() - started < 10, "the stop waited for the long poll"
    finally:
        consumer.close()
    assert "Traceback" not in srv.log()


@pytest.mark.skipif(not os.path.exists(ETCD),
                    reason="etcd is not installed (.ci/run installs etcd-server)")
def test_users_arriving_while_serving_close_the_kafka_door(tmp_path):
    etcd = EtcdProcess(str(tmp_path / "etcd")).start()
    node = KafkaServer(str(tmp_path / "node"), {**SMALL, "server": {"lease_ttl_s": 3}})
    node.extra_args += ("--coordinator", etcd.url, "--group", "g")
    try:
        node.start()
        address = ("127.0.0.1", node.kafka_port)
        asked = request_type(3, 12)(topics=None, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False)
        metadata = frame_request(asked)

        def answered() -> bool:
            try:
                return exchange(address, asked) is not None
            except (ConnectionError, OSError):  # users not read from etcd yet: closed
                return False

        # A group's first node wins its election and reopens as the primary (its Kafka
        # door closes and opens again): the scenario starts once it serves as the primary.
        wait_until(lambda: "becoming the primary" in node.log(), 30,
                   "the node to win its group's election")
        wait_until(answered, 30, "the node to read that the cluster has no users")
        # A connection serving without a log-in while the cluster has no users...
        # (closed however the test ends: a failed assertion's traceback would keep it open
        # until a later test's garbage collection, which then fails on its ResourceWarning)
        with socket.create_connection(address, timeout=10) as open_before:
            open_before.sendall(metadata)
            assert recv_frame(open_before)
            # A user added to the cluster reaches this node through its watch of etcd.
            added = subprocess.run([*FMQ, "user", "add", "carol", "--coordinator", etcd.url],
                                   env={**os.environ, "FMQ_NEW_PASSWORD": "s3cret-password"},
                                   capture_output=True, text=True, timeout=60)
            assert added.returncode == 0, added.stderr
            security = Path(node.data_dir) / "security.json"
            wait_until(lambda: security.exists() and "carol" in security.read_text(), 30,
                       "the node to copy carol")
            # (the file is written a moment before the node enforces it): a new connection
            # is closed at Metadata, before log-in only ApiVersions and the SASL handshake
            # are answered now, ...
            wait_until(lambda: not answered(), 30, "the node to require a log-in")
            assert exchange(address, request_type(18, 0)())[1].error_code == 0
            # ... and the connection that served before is closed at its next request.
            open_before.sendall(metadata)
            assert closed_by_server(open_before, 10)
        assert "Metadata before log-in" in node.log()
    finally:
        node.kill()
        etcd.stop()
