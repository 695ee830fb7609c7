"""The send path's per-batch shortcuts give what the plain per-message code gives.

* ``new_send_result`` makes a :class:`SendResult` equal to the constructor's: equal, same
  hash and repr, frozen, pickled and copied alike.
* ``new_message`` makes a :class:`Message` equal to the constructor's.
* ``results_to_wire`` packs a SEND_BATCH answer's results at once, ``send_answer`` a SEND's
  answer: the same frame as the field dicts through the codec, and the codec's error for a
  value out of its field.
* ``check_messages`` checks a topic's name once per batch: a batch fails with the error of
  its first message that fails alone, and passes when each passes alone.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.config import BrokerConfig
from fmq.engine import queues as seat
from fmq.message import Message, SendResult, new_message, new_send_result
from fmq.protocol import Op, encode_response
from fmq.protocol.values import result_to_wire, results_to_wire, send_answer
from tests.native.test_placement_twins import messages
from tests.native.twins import outcome

CONFIG = BrokerConfig(segment_size=64 * 1024, max_message_size=4096)


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**63))
def test_a_new_send_result_is_the_constructors(offset: int, qid: int, qoff: int) -> None:
    fast, made = new_send_result(offset, qid, qoff), SendResult(offset, qid, qoff)
    assert fast == made and hash(fast) == hash(made) and repr(fast) == repr(made)
    assert dataclasses.asdict(fast) == dataclasses.asdict(made)
    assert pickle.loads(pickle.dumps(fast)) == made == copy.copy(fast)
    assert dataclasses.replace(fast, group="g") == SendResult(offset, qid, qoff, "g")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.offset = 1  # type: ignore[misc]


@given(st.text(), st.binary(), st.none() | st.text(), st.none() | st.text(),
       st.none() | st.dictionaries(st.text(), st.text()), st.none() | st.integers())
def test_a_new_message_is_the_constructors(topic, body, key, tags, properties, qid) -> None:
    fast = new_message(topic, body, key, tags, properties, qid)
    made = Message(topic, body, key=key, tags=tags, properties=properties, queue_id=qid)
    assert fast == made and repr(fast) == repr(made)
    assert dataclasses.asdict(fast) == dataclasses.asdict(made)
    fast.key = "changed"  # a plain dataclass: its fields can be set
    assert fast.key == "changed"


FIELD = st.integers(0, 2**64 - 1) | st.sampled_from([-1, 2**64, 2**32, 1.5, "1", None])


@given(st.lists(st.tuples(FIELD, FIELD, FIELD), max_size=5))
def test_packed_results_answer_as_the_codec(fields: list[tuple]) -> None:
    results = [SendResult(*f) for f in fields]
    packed = outcome(encode_response, Op.SEND_BATCH, 7, {"results": results_to_wire(results)})
    dicts = outcome(encode_response, Op.SEND_BATCH, 7,
                    {"results": [result_to_wire(r) for r in results]})
    assert packed == dicts


@given(FIELD, FIELD, FIELD)
def test_a_packed_send_answer_is_the_codecs(offset, queue_id, queue_offset) -> None:
    result = SendResult(offset, queue_id, queue_offset)
    packed = outcome(encode_response, Op.SEND, 7, send_answer(result))
    assert packed == outcome(encode_response, Op.SEND, 7, {"result": result_to_wire(result)})


@settings(max_examples=300, deadline=None)
@given(batch=st.lists(messages(), max_size=8),
       auto_create=st.booleans())
def test_a_batch_is_checked_as_its_messages_one_by_one(batch: list[Message],
                                                       auto_create: bool) -> None:
    queues = seat.Queues(4, {("a", 6): 1}, auto_create=auto_create)
    alone = [outcome(seat.check_messages, [m], CONFIG, queues) for m in batch]
    first_failure = next((o for o in alone if o[0] != "value"), ("value", None))
    assert outcome(seat.check_messages, batch, CONFIG, queues) == first_failure


def test_a_topic_checked_once_still_checks_each_message() -> None:
    queues = seat.Queues(4, {})
    good = Message("a", b"x")
    for bad, error in ((Message("a", b"x", key="k\x00"), "key must not contain NUL"),
                       (Message("a", "text"), "message body must be bytes"),  # type: ignore[arg-type]
                       (Message("a", b"x" * 5000), "max_message_size"),
                       (Message("a", b"x", queue_id=9), "queue")):
        got = outcome(seat.check_messages, [good, good, bad], CONFIG, queues)
        assert got[0] == "raised" and error in got[2], (bad, got)
