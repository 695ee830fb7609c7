"""What no well-behaved client sends, over a bare socket: every ApiVersions version and one
too new, an API this server does not implement, frames with a hostile length, and a batch
whose CRC does not match. Each gets the protocol's own answer or a logged close, never a
traceback, and nothing bad is stored."""

from __future__ import annotations

import socket
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from fmq.client import Client
from fmq.protocol import Op
from tests.server.harness import closed_by_server, wait_until

from .wire import exchange, frame_request, read_response, recv_frame, request_type

UNSUPPORTED_VERSION = 35
CORRUPT_MESSAGE = 2


def address(srv) -> tuple[str, int]:
    return ("127.0.0.1", srv.kafka_port)


def api_versions_request(version: int):
    cls = request_type(18, version)
    if version >= 3:
        return cls(client_software_name="fmq-test", client_software_version="1")
    return cls()


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_answers_every_served_version(shared_kafka_server, version):
    header, answer = exchange(address(shared_kafka_server), api_versions_request(version), 41)
    assert header.correlation_id == 41
    assert answer.error_code == 0
    served = {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}
    assert served[18] == (0, 3)
    assert served[0] == (3, 9) and served[1] == (4, 12)
    assert served[24] == (0, 3)  # AddPartitionsToTxn (docs/kafka.md, Exactly-once)
    assert 4 not in served  # LeaderAndIsr: a controller's API, not served, so not advertised


def test_a_too_new_api_versions_gets_version_0_with_the_ranges(shared_kafka_server):
    request = api_versions_request(4) if _has_version(18, 4) else None
    if request is None:  # kio without v4: forge v3's bytes under version 4
        data = bytearray(frame_request(api_versions_request(3)))
        struct.pack_into(">h", data, 6, 4)
    else:
        data = frame_request(request)
    with socket.create_connection(address(shared_kafka_server), timeout=10) as sock:
        sock.sendall(bytes(data))
        _, answer = read_response(recv_frame(sock), 18, 0)
    assert answer.error_code == UNSUPPORTED_VERSION
    assert any(a.api_key == 18 and a.max_version == 3 for a in answer.api_keys)


def _has_version(key: int, version: int) -> bool:
    try:
        request_type(key, version)
    except Exception:
        return False
    return True


def test_an_unknown_api_key_gets_unsupported_version_and_the_connection_stays(
        shared_kafka_server):
    with socket.create_connection(address(shared_kafka_server), timeout=10) as sock:
        sock.sendall(struct.pack(">ihhih", 10, 9999, 0, 77, -1))
        frame = recv_frame(sock)
        assert struct.unpack(">ih", frame) == (77, UNSUPPORTED_VERSION)
        sock.sendall(frame_request(api_versions_request(0), 78))  # still served
        header, answer = read_response(recv_frame(sock), 18, 0)
        assert header.correlation_id == 78 and answer.error_code == 0


@pytest.mark.parametrize("size", [-5, 2**31 - 1, 3])
def test_a_hostile_frame_length_closes_the_connection_with_a_log_line(kafka_server, size):
    srv = kafka_server()
    with socket.create_connection(address(srv), timeout=10) as sock:
        sock.sendall(struct.pack(">i", size) + b"\0" * 8)
        assert closed_by_server(sock, 10)
    wait_until(lambda: "kafka connection" in srv.log() and "closed:" in srv.log(), 10,
               "the close's log line")
    log = srv.log()
    assert "Traceback" not in log
    assert f"frame size {size}" in log or f"frame of {size} bytes" in log
    # The server goes on serving Kafka clients.
    _, answer = exchange(address(srv), api_versions_request(0))
    assert answer.error_code == 0


def test_a_request_off_its_schema_closes_the_connection(kafka_server):
    srv = kafka_server()
    with socket.create_connection(address(srv), timeout=10) as sock:
        sock.sendall(struct.pack(">ihhih", 12, 3, 0, 5, 3) + b"ab")  # Metadata v0, cut short
        assert closed_by_server(sock, 10)
    wait_until(lambda: "does not match its schema" in srv.log(), 10, "the log line")
    assert "Traceback" not in srv.log()


def produce_request(topic: str, records: bytes):
    cls = request_type(0, 8)
    module = __import__(cls.__module__, fromlist=["x"])
    return cls(transactional_id=None, acks=-1, timeout=__import__("datetime").timedelta(
        seconds=10), topic_data=(module.TopicProduceData(name=topic, partition_data=(
            module.PartitionProduceData(index=0, records=records),)),))


def batch(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    builder.append(0, timestamp=1_700_000_000_000, key=b"k", value=value, headers=[])
    return bytes(builder.build())


def test_a_batch_with_a_bad_crc_is_refused_and_nothing_is_stored(shared_kafka_server):
    srv = shared_kafka_server
    good = batch(b"first")
    _, answer = exchange(address(srv), produce_request("crc", good))
    [part] = answer.responses[0].partition_responses
    assert (part.error_code, part.base_offset) == (0, 0)
    bad = bytearray(batch(b"second"))
    bad[-3] ^= 0x40
    _, answer = exchange(address(srv), produce_request("crc", bytes(bad)))
    [part] = answer.responses[0].partition_responses
    assert part.error_code == CORRUPT_MESSAGE
    assert "CRC" in (part.error_message or "")
    with Client(srv.address) as client:
        answer = client.call(Op.QUEUE_RANGE, {"topic": "crc", "queue_id": 0})
    assert (answer["min_offset"], answer["next_offset"]) == (0, 1)


def test_a_frame_that_stops_arriving_and_an_idle_connection_are_closed(kafka_server):
    srv = kafka_server({"server": {"read_timeout_ms": 500, "idle_timeout_ms": 1500}})
    with socket.create_connection(address(srv), timeout=10) as slow, \
            socket.create_connection(address(srv), timeout=10) as idle:
        slow.sendall(struct.pack(">i", 1000) + b"\0" * 10)  # 990 bytes never come
        assert closed_by_server(slow, 10)
        assert closed_by_server(idle, 10)
    wait_until(lambda: "read_timeout_ms" in srv.log() and "idle_timeout_ms" in srv.log(), 10,
               "both closes' log lines")
    assert "Traceback" not in srv.log()


def test_a_produce_of_two_topics_answers_each_partition_and_stores_the_good_ones(
        shared_kafka_server):
    """One Produce naming two topics, one partition of the second damaged: the handler
    submits the good partitions together and answers every partition in request order."""
    srv = shared_kafka_server
    cls = request_type(0, 8)
    module = __import__(cls.__module__, fromlist=["x"])
    bad = bytearray(batch(b"damaged"))
    bad[-3] ^= 0x40
    request = cls(transactional_id=None, acks=-1, timeout=__import__("datetime").timedelta(
        seconds=10), topic_data=(
            module.TopicProduceData(name="two-a", partition_data=(
                module.PartitionProduceData(index=0, records=batch(b"a0")),)),
            module.TopicProduceData(name="two-b", partition_data=(
                module.PartitionProduceData(index=1, records=bytes(bad)),
                module.PartitionProduceData(index=0, records=batch(b"b0") + batch(b"b1")),
            ))))
    _, answer = exchange(address(srv), request)
    got = [(t.name, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
           for t in answer.responses]
    assert got == [("two-a", [(0, 0, 0)]), ("two-b", [(1, CORRUPT_MESSAGE, -1), (0, 0, 0)])]
    with Client(srv.address) as client:
        ranges = [(topic, queue, client.call(Op.QUEUE_RANGE, {"topic": topic,
                                                              "queue_id": queue}))
                  for topic, queue in (("two-a", 0), ("two-b", 0), ("two-b", 1))]
    assert [(t, q, r["min_offset"], r["next_offset"]) for t, q, r in ranges] == [
        ("two-a", 0, 0, 1), ("two-b", 0, 0, 2), ("two-b", 1, 0, 0)]
