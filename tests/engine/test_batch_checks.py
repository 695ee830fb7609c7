"""The engine's check of a batch (``check_messages``: what the batch's messages share
checked once) against its per-message reference (``check_messages_each``), on real brokers
(a real log and index in a scratch directory) of several settings, on both paths (the pure
module and its compiled twin ``_queue_placement_c``, whatever FMQ_NO_EXTENSIONS says):

* any batch, messages near every check's edge (bodies around the broker's and a topic's
  ``max_message_size`` and a segment's room; keys and tags of 255 and 256 bytes, with NUL,
  not UTF-8; properties at and over their limit, FMQ's own ``%`` ones, an idempotent
  producer's; queue ids in and out of range and of the wrong type; hostile fields) sent to
  any topics (created, limited, deleted, unknown with auto-creation off, FMQ's own, invalid
  names): the two raise the same error (type and message) or both pass;
* batches with the decoder's knowledge (``largest``: one topic and queue id, plain fields,
  the largest body's index) alike;
* and the shortcut does prove the usual batches (one topic or several, keys, tags and
  plain properties, queue ids), so that they are not checked message by message.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq import Broker, BrokerConfig
from fmq.engine import queue_placement as pure
from fmq.engine import queues as seat
from fmq.log.record import HEADER_SIZE, RECORD_BOUND
from fmq.message import MAX_PROPERTIES, Message
from fmq.server.kafka.record_messages import plain_largest
from tests.native.twins import compiled, outcome

QUEUES = 4
#: name -> the broker's settings: the defaults (every record surely fits a segment), small
#: segments (the records' room decided by their exact size) and no auto-creation.
CONFIGS = {
    "default": {},
    "small segment": {"segment_size": 8192, "max_message_size": 7000},
    "smallest segment": {"segment_size": 4096, "max_message_size": 2500},
    # The bound of a record's room meets the bodies tried: 3,000 bytes and less, with any
    # key, tags and properties, surely fit; a larger body may, or may not.
    "bound at 3000": {"segment_size": HEADER_SIZE + RECORD_BOUND + MAX_PROPERTIES + 3000,
                      "max_message_size": 7000},
    "no auto-create": {"max_message_size": 1500, "auto_create_topics": False},
}
TOPICS = ["t", "t", "wide", "limited", "gone", "never", "%RETRY%g", "bad topic", "a" * 127,
          "a" * 128, ""]
BODIES = [0, 10, 999, 1000, 1001, 1499, 1500, 1501, 2499, 2500, 2501, 2999, 3000, 3001,
          6999, 7000, 7001, 7500]
LABELS = [None, "", "k", "k" * 255, "k" * 256, "a\x00b", "é" * 127, "é" * 128, "\ud800", 5]
PROPERTIES = [None, {}, {"h": "v"}, {"CreateTime": "1732838400000", "trace": "x" * 40},
              {"%x": "v"}, {"%producer": "p", "%seq": "1"}, {"%producer": "p"},
              {"%msgid": "m"}, {"é": "v"}, {"h": 5}, [("a", "b")], {"x": "\ud800"},
              {"n": "v" * 3000}, {"a": "x" * (MAX_PROPERTIES - 7)},
              {"a": "x" * (MAX_PROPERTIES - 6)}]
QUEUE_IDS = [None, None, 0, 3, 4, 7, 8, -1, True, 2**70, "1", 1.0]
BODY_KINDS = ["bytes", "bytes", "bytes", "bytearray", "memoryview", "str", "none"]


@pytest.fixture(scope="module", params=["pure", "compiled"])
def twin(request):
    """The module checked: the pure one, then its compiled twin."""
    return pure if request.param == "pure" else compiled("fmq.engine._queue_placement_c")


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    """A real broker of each of CONFIGS, its topics as TOPICS names them ("wide" has more
    queues than ``queues_per_topic``)."""
    opened = {}
    for name, settings_ in CONFIGS.items():
        cfg = BrokerConfig(checkpoint_interval_ms=0, retention_interval_ms=0,
                           queues_per_topic=QUEUES, **settings_)
        broker = Broker.open(str(tmp_path_factory.mktemp("checks") / "data"), cfg)
        broker.topics.create("t")
        broker.topics.create("wide", queues=8)
        broker.topics.create("limited", max_message_size=1000)
        broker.topics.create("gone")
        broker.topics.delete("gone")
        opened[name] = broker
    yield opened
    for broker in opened.values():
        broker.close()


def _body(kind: str, size: int) -> object:
    data = bytes([65 + size % 26]) * size
    return {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data),
            "str": data.decode(), "none": None}[kind]


@st.composite
def messages(draw) -> object:
    """Mostly messages that pass, some near or past each check's edge, a few not
    messages at all."""
    if draw(st.integers(0, 40)) == 0:
        return draw(st.sampled_from([None, {"topic": "t", "body": b""}, "t"]))
    kind = draw(st.sampled_from(BODY_KINDS)) if draw(st.integers(0, 5)) == 0 else "bytes"
    m = Message(draw(st.sampled_from(TOPICS)), _body(kind, draw(st.sampled_from(BODIES))))
    if draw(st.integers(0, 2)) == 0:
        m.key = draw(st.sampled_from(LABELS))
    if draw(st.integers(0, 3)) == 0:
        m.tags = draw(st.sampled_from(LABELS))
    if draw(st.integers(0, 2)) == 0:
        m.properties = draw(st.sampled_from(PROPERTIES))
    if draw(st.integers(0, 2)) == 0:
        m.queue_id = draw(st.sampled_from(QUEUE_IDS))
    if draw(st.integers(0, 30)) == 0:
        m.topic = draw(st.sampled_from([None, 7, b"t"]))
    return m


def _queues(broker: Broker):
    return broker._queues  # the real broker's queue state, read by both modules alike


@pytest.mark.parametrize("config", list(CONFIGS))
@settings(max_examples=300, deadline=None)
@given(batch=st.lists(messages(), max_size=8),
       container=st.sampled_from(["list", "list", "tuple"]))
def test_a_batch_is_refused_and_passed_as_message_by_message(twin, brokers, config, batch,
                                                             container):
    broker = brokers[config]
    batch = tuple(batch) if container == "tuple" else batch
    assert outcome(twin.check_messages, batch, broker.config, _queues(broker)) == \
        outcome(twin.check_messages_each, batch, broker.config, _queues(broker))


def _variants() -> list[object]:
    """A message for each value of each field tried above (the others those of a message
    that passes), and things that are not messages."""
    found: list[object] = [None, "t", {"topic": "t", "body": b""}]
    found += [Message(topic, b"x") for topic in [*TOPICS, None, 7, b"t"]]
    found += [Message("t", _body(kind, size)) for kind in BODY_KINDS for size in BODIES]
    found += [Message("t", b"x", key=label) for label in LABELS]
    found += [Message("t", b"x", tags=label) for label in LABELS]
    found += [Message("t", b"x", properties=properties) for properties in PROPERTIES]
    found += [Message("t", b"x", queue_id=queue_id) for queue_id in QUEUE_IDS]
    return found


@pytest.mark.parametrize("config", list(CONFIGS))
def test_each_way_to_fail_is_found_among_messages_that_pass(twin, brokers, config):
    """Every value tried, alone in a batch of messages that pass (before and after it, of
    its topic or not, and with a larger body beside it), is refused or passed as the
    reference has it."""
    broker = brokers[config]
    queues = _queues(broker)
    for variant in _variants():
        for batch in ([variant], [Message("t", b"y" * 10), variant, Message("t", b"z")],
                      [Message("wide", b"y", queue_id=5), variant],
                      [variant, Message("t", b"w" * 2400)]):
            assert outcome(twin.check_messages, batch, broker.config, queues) == \
                outcome(twin.check_messages_each, batch, broker.config, queues), batch


@st.composite
def plain_batches(draw) -> tuple[list[Message], int]:
    """A batch as the Kafka door's decoder makes one with its knowledge: one topic and
    queue id (any, in range or not), bodies of bytes, keys and properties that pass
    ``check_message``'s own rules, no tags; and the index of the first largest body."""
    topic = draw(st.sampled_from(TOPICS))
    queue_id = draw(st.sampled_from([0, 3, 4, 7, 8]))
    batch = [Message(topic, _body("bytes", draw(st.sampled_from(BODIES))),
                     key=draw(st.sampled_from([None, "k", "k" * 255, "é" * 127])),
                     properties=draw(st.sampled_from(
                         [{"CreateTime": "1"}, {"h": "v" * 3000},
                          {"a": "x" * (MAX_PROPERTIES - 7)}])),
                     queue_id=queue_id)
             for _ in range(draw(st.integers(1, 6)))]
    largest = plain_largest(batch)
    assert largest >= 0
    return batch, largest


@pytest.mark.parametrize("config", list(CONFIGS))
@settings(max_examples=200, deadline=None)
@given(plain=plain_batches())
def test_a_decoders_knowledge_checks_as_message_by_message(twin, brokers, config, plain):
    broker = brokers[config]
    batch, largest = plain
    assert outcome(twin.check_messages, batch, broker.config, _queues(broker), largest) == \
        outcome(twin.check_messages_each, batch, broker.config, _queues(broker))


def test_the_first_refused_message_is_named_not_the_largest(twin, brokers):
    broker = brokers["default"]
    batch = [Message("limited", b"x" * n) for n in (10, 1001, 5000, 1002)]
    for largest in (-1, 2):
        got = outcome(twin.check_messages, batch, broker.config, _queues(broker), largest)
        assert got[:2] == ("raised", "MessageTooLarge") and "1001 bytes" in got[2]
    # In a small segment a smaller body with larger properties may be the one not fitting.
    broker = brokers["small segment"]
    batch = [Message("t", b"x" * 7000), Message("t", b"x" * 6000, properties={"h": "v" * 3000})]
    got = outcome(twin.check_messages, batch, broker.config, _queues(broker), 0)
    assert got[:2] == ("raised", "MessageTooLarge") and "segment" in got[2]
    assert got == outcome(twin.check_messages_each, batch, broker.config, _queues(broker))


USUAL = [
    [Message("t", b"x" * 1024) for _ in range(16)],
    [Message("t", b"x" * n, key=f"k{n}", tags="a", properties={"h": str(n)}, queue_id=n % 4)
     for n in range(16)],
    [Message(topic, b"x" * 100, queue_id=7 if topic == "wide" else None)
     for topic in ("t", "wide", "t", "limited", "never", "t")],
    [Message("t", bytearray(10)), Message("t", memoryview(b"abc"), key="", properties={})],
    (Message("t", b"", properties={"%producer": "p", "%seq": "1"}),),
]


@pytest.mark.parametrize("batch", range(len(USUAL)))
def test_the_usual_batches_are_proven_at_once(twin, brokers, batch):
    broker = brokers["default"]
    assert twin.batch_passes(USUAL[batch], broker.config, _queues(broker)) is True
    assert outcome(twin.check_messages, USUAL[batch], broker.config, _queues(broker)) == \
        ("value", None)


def test_a_decoders_batch_is_proven_from_its_largest_message(twin, brokers):
    broker = brokers["default"]
    batch = [Message("t", b"x" * n, properties={"CreateTime": "1"}, queue_id=3)
             for n in (5, 900, 40)]
    assert twin.batch_passes(batch, broker.config, _queues(broker), 1) is True


def test_the_seat_checks_with_the_running_module():
    assert seat.check_messages is seat.PLACEMENT_MODULE.check_messages
    assert seat.TWINS["check_messages_each"][1] is seat.PLACEMENT_MODULE.check_messages_each
