"""Fetch sessions (KIP-227): FMQ keeps none, and answers as a Kafka broker without them.

* A full fetch (session epoch 0, asking for a session, or -1, sessionless) is served and
  answered with session id 0: no session was created, the next fetch is full again.
* An incremental fetch (any other epoch) names only what changed in a session FMQ never
  gave out: FETCH_SESSION_ID_NOT_FOUND with no partitions, never its partitions read as if
  they were the whole request.
* kafka-python (which asks for sessions) and confluent-kafka read everything, in order and
  once, over many fetches while records keep arriving.
"""

from __future__ import annotations

import datetime
import time

from kio.schema.errors import ErrorCode

from .test_clients import consume, produce_all
from .wire import exchange, request_type


def fetch_request(topic: str, offset: int, session_id: int, session_epoch: int,
                  version: int = 11):
    cls = request_type(1, version)
    module = __import__(cls.__module__, fromlist=["x"])
    part = module.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                 log_start_offset=-1, partition_max_bytes=1 << 20)
    rack = {"rack_id": ""} if version >= 11 else {}
    return cls(replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
               max_bytes=1 << 20, isolation_level=0, session_id=session_id,
               session_epoch=session_epoch,
               topics=(module.FetchTopic(topic=topic, partitions=(part,)),),
               forgotten_topics_data=(), **rack)


def test_full_fetches_are_served_without_a_session(shared_kafka_server):
    srv = shared_kafka_server
    produce_all(srv.bootstrap, "sessions-full", [(b"k", b"v", [])] * 3)
    address = ("127.0.0.1", srv.kafka_port)
    for session_id, epoch in ((0, 0), (0, -1), (123, 0), (123, -1)):
        _, answer = exchange(address, fetch_request("sessions-full", 1, session_id, epoch))
        assert (answer.error_code, answer.session_id) == (ErrorCode.none, 0), (session_id,
                                                                             epoch)
        [part] = answer.responses[0].partitions
        assert (part.error_code, part.high_watermark) == (ErrorCode.none, 3)
        assert part.records, (session_id, epoch)


def test_an_incremental_fetch_is_answered_session_not_found(shared_kafka_server):
    srv = shared_kafka_server
    produce_all(srv.bootstrap, "sessions-incremental", [(b"k", b"v", [])] * 2)
    address = ("127.0.0.1", srv.kafka_port)
    for version in (9, 11, 12):
        for session_id, epoch in ((123, 1), (123, 7), (0, 1)):
            _, answer = exchange(address, fetch_request("sessions-incremental", 0, session_id,
                                                        epoch, version))
            assert answer.error_code == ErrorCode.fetch_session_id_not_found, (
                version, session_id, epoch, answer.error_code)
            assert (answer.session_id, answer.responses) == (0, ()), (version, session_id,
                                                                     epoch)


def test_kafka_python_which_asks_for_sessions_reads_everything_once(shared_kafka_server):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    srv = shared_kafka_server
    topic = "sessions-kafka-python"
    consumer = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=100,
                             max_partition_fetch_bytes=4096)
    produce_all(srv.bootstrap, topic, [(b"k", b"first", [])])
    consumer.assign([KTopicPartition(topic, 0)])
    consumer.seek(KTopicPartition(topic, 0), 0)
    got: list[tuple[int, bytes]] = []
    sent = 1
    deadline = time.monotonic() + 60
    try:
        # Records arrive in rounds while the consumer fetches: many fetches, each full.
        while len(got) < 301 and time.monotonic() < deadline:
            if sent < 301:
                produce_all(srv.bootstrap, topic,
                            [(b"k", b"m-%d" % i, []) for i in range(sent, sent + 50)])
                sent += 50
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((r.offset, r.value) for r in records)
    finally:
        consumer.close()
    assert [o for o, _ in got] == list(range(301)), "offsets lost or repeated"
    assert [v for _, v in got] == [b"first"] + [b"m-%d" % i for i in range(1, 301)]
    # librdkafka fetches without sessions (epoch -1): the same records, the same way.
    assert [m.offset() for m in consume(srv.bootstrap, topic, 301)] == list(range(301))
