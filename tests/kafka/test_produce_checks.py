"""Produce's checks of a partition's messages (the engine's ``check_messages`` with the
door's decoder's knowledge: one topic and queue, which messages are plain, the largest
body's index) against the engine's per-message reference (``check_messages_each``): on real
brokers (a real log and index in a scratch directory) of several settings, for any records
near every check's edge (bodies around the broker's and a topic's ``max_message_size`` and
a segment's room, keys of 255 and 256 bytes or with NUL, non-ASCII and ``%`` headers, an
idempotent producer's properties) sent to any topic (created, limited, deleted, unknown
with auto-creation off, FMQ's own, an invalid name) and partition (in range or not), the
two raise the same error (type and message) or both pass. Both decoders are run: the
compiled one where it is installed, and the reference.

Then through a real server's Kafka port: a record over the limit gets MESSAGE_TOO_LARGE
with the first refused message named, and nothing of its partition is stored."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from fmq import Broker, BrokerConfig
from fmq.client import Client
from fmq.engine.queues import check_messages_each
from fmq.protocol import Op
from fmq.server.kafka import record_messages as R
from fmq.server.kafka.record_messages import messages_of_records

from .wire import exchange, request_type

LIMIT = 1 << 20
MESSAGE_TOO_LARGE = 10
QUEUES = 4
#: name -> the broker's settings: the defaults (every record surely fits a segment), a small
#: segment (the records' room decided by their exact size) and no auto-creation.
CONFIGS = {
    "default": {},
    "small segment": {"segment_size": 8192, "max_message_size": 7000},
    "no auto-create": {"max_message_size": 1500, "auto_create_topics": False},
}
TOPICS = ["t", "limited", "gone", "never", "%RETRY%g", "bad topic", "a" * 128]
BODIES = [0, 10, 999, 1000, 1001, 1499, 1500, 1501, 6999, 7000, 7001, 7500]
KEYS = st.sampled_from([None, b"", b"k", b"k" * 255, b"k" * 256, b"a\x00b",
                        "é".encode() * 128])
HEADERS = st.lists(st.tuples(st.sampled_from(["h", "trace", "é", "%x", "n" * 300]),
                             st.sampled_from([None, b"v", b"\x00", "é".encode(),
                                              b"v" * 3000])), max_size=2, unique_by=lambda h: h[0])
RECORD = st.tuples(KEYS, st.sampled_from(BODIES) | st.none(), HEADERS)
DECODERS = {"active": R.plain_messages_of_records, "reference": R.reference_plain_messages}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    """A real broker of each of CONFIGS, its topics as TOPICS names them."""
    opened = {}
    for name, settings_ in CONFIGS.items():
        cfg = BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0,
                           queues_per_topic=QUEUES, **settings_)
        broker = Broker.open(str(tmp_path_factory.mktemp("checks") / "data"), cfg)
        broker.topics.create("t")
        broker.topics.create("limited", max_message_size=1000)
        broker.topics.create("gone")
        broker.topics.delete("gone")
        opened[name] = broker
    yield opened
    for broker in opened.values():
        broker.close()


def batch(records, producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    producer_id, epoch, sequence = producer
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=epoch,
                                        base_sequence=sequence, batch_size=LIMIT)
    for i, (key, size, headers) in enumerate(records):
        value = None if size is None else bytes([65 + i % 26]) * size
        builder.append(i, timestamp=1_700_000_000_000 + i, key=key, value=value,
                       headers=headers)
    return bytes(builder.build())


def door_check(broker: Broker, messages, largest: int) -> None:
    """What the door calls: the engine's check with the decoder's knowledge."""
    broker.check_messages(messages, largest)


def reference(broker: Broker, messages) -> None:
    """The engine's per-message checks (the reference the batch check must equal)."""
    check_messages_each(messages, broker.config, broker._queues)


def _outcome(fn, *args) -> tuple:
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - both must fail alike, whatever it is
        return ("raised", type(exc).__name__, str(exc))
    return ("passed",)


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("topic", TOPICS)
@settings(max_examples=60, deadline=None)
@given(records=st.lists(RECORD, min_size=1, max_size=5),
       partition=st.sampled_from([0, 3, 3, 4, 5]),
       producer=st.sampled_from([(-1, -1, -1), (-1, -1, -1), (9, 1, 0)]),
       decoder=st.sampled_from(list(DECODERS)))
def test_a_partitions_checks_refuse_and_pass_as_the_send_paths(brokers, config, topic, records,
                                                               partition, producer, decoder):
    broker = brokers[config]
    data = batch(records, producer)
    try:
        messages = messages_of_records(data, LIMIT, topic, partition)
    except ValueError:  # a record the door refuses before any check (INVALID_RECORD)
        return
    decoded = DECODERS[decoder](data, LIMIT, topic, partition)
    assert decoded[0] == messages
    assert _outcome(door_check, broker, *decoded) == \
        _outcome(reference, broker, messages)


def test_the_largest_body_stands_for_the_others_only_when_each_is_plain(brokers):
    """The first record over a topic's limit is the one named, not the largest; one over
    the broker's limit is refused on a topic without its own; a key of 256 bytes sends the
    whole partition to the send path's checks, which name its own error."""
    broker = brokers["default"]
    data = batch([(None, 10, []), (None, 1001, []), (None, 5000, []), (None, 1002, [])])
    decoded = R.plain_messages_of_records(data, LIMIT, "limited", 0)
    assert decoded[1] == 2
    refused = _outcome(door_check, broker, *decoded)
    assert refused[:2] == ("raised", "MessageTooLarge") and "1001 bytes" in refused[2]
    assert refused == _outcome(reference, broker, decoded[0])
    over = R.plain_messages_of_records(batch([(None, 10, []), (None, 1501, [])]), LIMIT,
                                       "t", 0)
    refused = _outcome(door_check, brokers["no auto-create"], *over)
    assert refused[:2] == ("raised", "MessageTooLarge") and "(max_message_size)" in refused[2]
    assert refused == _outcome(reference, brokers["no auto-create"], over[0])
    odd = R.plain_messages_of_records(batch([(b"k" * 256, 10, [])]), LIMIT, "t", 0)
    assert odd[1] == -1
    assert _outcome(door_check, broker, *odd) == (
        "raised", "InvalidArgument", "key is longer than 255 bytes")


def test_a_smaller_body_with_larger_properties_is_checked_for_its_segment_room(brokers):
    """In a small segment the largest body does not bound the records' room: a smaller
    body with a long header may be the record that does not fit, and is the one named."""
    broker = brokers["small segment"]
    data = batch([(None, 7000, []), (None, 6000, [("h", b"v" * 3000)])])
    decoded = R.plain_messages_of_records(data, LIMIT, "t", 0)
    assert decoded[1] == 0
    refused = _outcome(door_check, broker, *decoded)
    assert refused[:2] == ("raised", "MessageTooLarge") and "segment" in refused[2]
    assert refused == _outcome(reference, broker, decoded[0])


def _produce(srv, topic: str, records: bytes):
    cls = request_type(0, 8)
    module = __import__(cls.__module__, fromlist=["x"])
    request = cls(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
                  topic_data=(module.TopicProduceData(name=topic, partition_data=(
                      module.PartitionProduceData(index=0, records=records),)),))
    _, answer = exchange(("127.0.0.1", srv.kafka_port), request)
    [part] = answer.responses[0].partition_responses
    return part


def test_a_record_over_the_limit_is_refused_through_the_door_and_nothing_is_stored(
        kafka_server):
    """The broker's max_message_size and a topic's own: the partition's answer is
    MESSAGE_TOO_LARGE naming the first record over the limit, none of its records is stored
    (the good ones beside it neither), and the next good batch gets the next offset."""
    srv = kafka_server({"max_message_size": 4096, "checkpoint_interval_ms": 0})
    with Client(srv.address) as client:
        client.create_topic("small", max_message_size=1000)
    for topic, body, limit in (("big", 4097, "max_message_size"), ("small", 1001, "small")):
        good = _produce(srv, topic, batch([(None, 100, [])]))
        assert (good.error_code, good.base_offset) == (0, 0)
        refused = _produce(srv, topic, batch([(None, 10, []), (None, body, []),
                                              (None, body + 50, []), (None, 20, [])]))
        assert refused.error_code == MESSAGE_TOO_LARGE
        assert f"{body} bytes" in refused.error_message and limit in refused.error_message
        after = _produce(srv, topic, batch([(None, 30, [])]))
        assert (after.error_code, after.base_offset) == (0, 1)
        with Client(srv.address) as client:
            answer = client.call(Op.QUEUE_RANGE, {"topic": topic, "queue_id": 0})
            stored = client.call(Op.PULL, {"topic": topic, "queue_id": 0, "offset": 0,
                                           "max_messages": 10, "wait_ms": 0})
        assert (answer["min_offset"], answer["next_offset"]) == (0, 2)
        assert [len(m["body"]) for m in stored["messages"]] == [100, 30]
    assert "Traceback" not in srv.log()
