"""SaslHandshake version 0, Kafka's original SASL flow: the SASL messages follow the
handshake as bare frames (a 4-byte size and the bytes, no request header) and are answered
the same way; a failed log-in closes the connection, as Kafka does. Sent by kafka-python
told an older broker (``api_version``) and by clients older than Kafka 1.0's. Real server
processes, the bare protocol, and kafka-python."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from scramp import ScramClient

from fmq.client import Client
from tests.security.conftest import PASSWORD
from tests.server.harness import closed_by_server, server_stats

from .conftest import KafkaServer
from .test_security import FAST_LOGIN, secured_data
from .wire import frame_request, read_response, recv_exactly, recv_frame, request_type

pytestmark = pytest.mark.timeout(180)

SCRAM = "SCRAM-SHA-256"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    data = secured_data(str(tmp_path_factory.mktemp("ksasl0") / "data"))
    srv = KafkaServer(data, FAST_LOGIN, {"user": "admin", "password": PASSWORD})
    srv.start()
    yield srv
    srv.kill()


def _handshake_v0(sock: socket.socket, mechanism: str = SCRAM):
    sock.sendall(frame_request(request_type(17, 0)(mechanism=mechanism)))
    return read_response(recv_frame(sock), 17, 0)[1]


def _bare(sock: socket.socket, data: bytes) -> bytes:
    """Send a bare SASL frame and read the bare answer."""
    sock.sendall(struct.pack(">i", len(data)) + data)
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def _metadata(sock: socket.socket) -> list[str]:
    sock.sendall(frame_request(request_type(3, 1)(topics=None), correlation_id=11))
    header, answer = read_response(recv_frame(sock), 3, 1)
    assert header.correlation_id == 11
    return sorted(t.name for t in answer.topics)


def test_scram_after_handshake_v0_logs_in_with_bare_frames(secured):
    with socket.create_connection(("127.0.0.1", secured.kafka_port), timeout=10) as sock:
        handshake = _handshake_v0(sock)
        assert handshake.error_code == 0, handshake
        assert list(handshake.mechanisms) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        client = ScramClient([SCRAM], "alice", PASSWORD)
        client.set_server_first(_bare(sock, client.get_client_first().encode()).decode())
        client.set_server_final(_bare(sock, client.get_client_final().encode()).decode())
        # Logged in: the next frames are Kafka requests again, answered with her rules.
        assert _metadata(sock) == ["audit", "orders"]
    assert "logged in as 'alice' with SCRAM-SHA-256" in secured.log()


def test_a_wrong_password_after_handshake_v0_closes_the_connection(secured):
    with socket.create_connection(("127.0.0.1", secured.kafka_port), timeout=10) as sock:
        assert _handshake_v0(sock).error_code == 0
        client = ScramClient([SCRAM], "alice", "not-" + PASSWORD)
        client.set_server_first(_bare(sock, client.get_client_first().encode()).decode())
        sock.sendall(struct.pack(">i", len(final := client.get_client_final().encode()))
                     + final)
        assert closed_by_server(sock, 10)
    assert "SASL log-in after SaslHandshake v0 failed" in secured.log()


def test_a_request_before_the_bare_log_in_is_not_taken_for_one(secured):
    """After handshake v0 the next frame is a SASL message whatever it holds: a Kafka
    request there is a malformed SCRAM message, and the connection closes."""
    with socket.create_connection(("127.0.0.1", secured.kafka_port), timeout=10) as sock:
        assert _handshake_v0(sock).error_code == 0
        sock.sendall(frame_request(request_type(3, 1)(topics=None)))
        assert closed_by_server(sock, 10)


def test_kafka_python_told_an_older_broker_logs_in_with_handshake_v0(secured):
    """kafka-python with ``api_version=(0, 11)`` knows no SaslAuthenticate: it sends
    SaslHandshake v0 and bare SCRAM messages, then produces and reads back as alice."""
    authenticates = _sasl_authenticate_requests(secured)
    login = {"bootstrap_servers": secured.bootstrap, "api_version": (0, 11),
             "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": SCRAM,
             "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD}
    producer = KafkaProducer(**login)
    try:
        sent = producer.send("orders", b"over handshake v0", partition=0).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(**login, enable_auto_commit=False)
    try:
        where = TopicPartition("orders", 0)
        consumer.assign([where])
        consumer.seek(where, sent.offset)
        got = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        assert got[:1] == [b"over handshake v0"]
    finally:
        consumer.close()
    # Both logged in without a single SaslAuthenticate request: the bare frames did it.
    assert _sasl_authenticate_requests(secured) == authenticates


def _sasl_authenticate_requests(srv: KafkaServer) -> int:
    with Client(srv.address, user="admin", password=PASSWORD) as admin:
        return server_stats(admin)["kafka"]["requests_by_api"].get("SaslAuthenticate", 0)
