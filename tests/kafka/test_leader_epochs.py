"""OffsetForLeaderEpoch, Kafka's rule for a fetch past the high watermark, and what the door
counts (STATS, metrics), against real ``fmq server`` processes.

* OffsetForLeaderEpoch: the epoch asked and the queue's stored end; an epoch above the
  current one is Kafka's undefined (-1, -1); ``current_leader_epoch`` fences.
* A fetch at an offset past the high watermark but within what the node stores (a new
  primary whose followers do not hold its tail yet, here: a primary in ``sync`` mode whose
  follower is gone) is answered empty, not OFFSET_OUT_OF_RANGE; one past the stored end is
  out of range.
"""

from __future__ import annotations

import urllib.request

from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.server.harness import free_port, server_stats, wait_until

from .conftest import KafkaServer
from .test_clients import produce_all
from .test_wire import batch, produce_request
from .wire import exchange, request_type


def leader_epoch_request(version: int, topic: str, partitions: list[tuple[int, int, int]]):
    """(partition, leader epoch asked, current leader epoch) of each partition."""
    cls = request_type(23, version)
    module = __import__(cls.__module__, fromlist=["x"])
    parts = tuple(module.OffsetForLeaderPartition(partition=p, leader_epoch=epoch,
                                                  current_leader_epoch=current)
                  for p, epoch, current in partitions)
    topics = (module.OffsetForLeaderTopic(topic=topic, partitions=parts),)
    return cls(topics=topics) if version < 3 else cls(replica_id=-1, topics=topics)


def fetch_request(topic: str, offset: int, max_wait_ms: int = 0):
    import datetime

    cls = request_type(1, 11)
    module = __import__(cls.__module__, fromlist=["x"])
    part = module.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                 log_start_offset=-1, partition_max_bytes=1 << 20)
    return cls(replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
               min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
               session_epoch=-1, topics=(module.FetchTopic(topic=topic, partitions=(part,)),),
               forgotten_topics_data=(), rack_id="")


def test_offset_for_leader_epoch_answers_the_stored_end(kafka_server):
    srv = kafka_server()
    produce_all(srv.bootstrap, "epochs", [(b"k", b"v", [])] * 3)
    address = ("127.0.0.1", srv.kafka_port)
    for version in (2, 3, 4):
        _, answer = exchange(address, leader_epoch_request(version, "epochs", [
            (0, 0, -1), (0, 0, 0), (0, 5, -1), (0, 0, 1), (1, 0, -1), (9, 0, -1)]))
        parts = [(p.error_code, p.leader_epoch, p.end_offset)
                 for p in answer.topics[0].partitions]
        assert parts == [
            (ErrorCode.none, 0, 3),  # this server's epoch is 0: its end
            (ErrorCode.none, 0, 3),  # the client's current epoch is right
            (ErrorCode.none, -1, -1),  # an epoch this server never had: undefined
            (ErrorCode.unknown_leader_epoch, -1, -1),  # the client knows a newer epoch
            (ErrorCode.none, 0, 0),  # an empty partition
            (ErrorCode.unknown_topic_or_partition, -1, -1),
        ], version
    _, unknown = exchange(address, leader_epoch_request(4, "nowhere", [(0, 0, -1)]))
    assert unknown.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


def test_a_fetch_past_the_high_watermark_waits_and_past_the_stored_end_is_out_of_range(
        tmp_path):
    primary = KafkaServer(str(tmp_path / "primary"), {
        "ack_mode": "sync", "min_insync": 1, "max_lag_ms": 500}).start()
    follower = KafkaServer(str(tmp_path / "follower"), {"follow": primary.address})
    try:
        follower.start()

        def replicated() -> bool:  # once the follower is in sync, acks=all succeeds
            try:
                produce_all(primary.bootstrap, "held", [(b"k", b"copied", [])])
            except AssertionError:
                return False
            return True

        wait_until(replicated, 60, "a record the follower holds")
        follower.kill()  # from here the primary stores what no follower holds
        address = ("127.0.0.1", primary.kafka_port)
        _, before = exchange(address, fetch_request("held", 0))
        watermark = before.responses[0].partitions[0].high_watermark
        assert watermark >= 1
        for _ in range(3):  # refused (NOT_ENOUGH_REPLICAS) but stored past the watermark
            exchange(address, produce_request("held", batch(b"not replicated")))
        _, at_end = exchange(address, leader_epoch_request(4, "held", [(0, 0, -1)]))
        stored_end = at_end.topics[0].partitions[0].end_offset
        assert stored_end >= watermark + 3

        for offset in (watermark + 1, stored_end):
            _, inside = exchange(address, fetch_request("held", offset))
            [part] = inside.responses[0].partitions
            assert (part.error_code, part.high_watermark, part.records) == (
                ErrorCode.none, watermark, b""), f"offset {offset}: wait, not out of range"
        _, past = exchange(address, fetch_request("held", stored_end + 1))
        assert past.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
        _, below = exchange(address, fetch_request("held", 0))
        assert below.responses[0].partitions[0].error_code == ErrorCode.none
        assert below.responses[0].partitions[0].high_watermark == watermark
    finally:
        follower.kill()
        primary.kill()


def test_stats_and_metrics_count_kafka_connections_and_requests(kafka_server):
    metrics_port = free_port()
    srv = kafka_server({"server": {"metrics_port": metrics_port}})
    produce_all(srv.bootstrap, "counted", [(b"k", b"v", [])] * 2)
    consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "counted",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("counted", 0, 0)])
        wait_until(lambda: consumer.poll(0.2) is not None, 20, "a fetched message")
        kafka = server_stats(srv.address)["kafka"]
        assert kafka["connections"] >= 1  # the consumer's, at least
        by_api = kafka["requests_by_api"]
        assert by_api["Produce"] >= 1 and by_api["Fetch"] >= 1 and by_api["ApiVersions"] >= 2
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                      timeout=10).read().decode()
        assert 'fmq_kafka_requests_total{api="Produce"}' in text
        gauge = [line for line in text.splitlines()
                 if line.startswith("fmq_kafka_connections ")]
        assert gauge and float(gauge[0].split()[1]) >= 1
    finally:
        consumer.close()
    wait_until(lambda: server_stats(srv.address)["kafka"]["connections"] == 0, 20,
               "every Kafka connection closed")
