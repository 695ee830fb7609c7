"""The compiled placement (``fmq.engine._queue_placement_c``) against the pure module it is
compiled from (``fmq.engine.queue_placement``): from the same queue state, the same
messages refused with the same error (type and message), the same queues and offsets
chosen, the same bytes in a real log, the same counters; hostile messages and topic
settings included. And the one seat choosing them (``fmq.engine.queues``)."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq import native
from fmq.config import BrokerConfig
from fmq.engine import queue_placement as pure
from fmq.engine import queues as seat
from fmq.log.log import Log
from fmq.log.placement import reserve_segments
from fmq.log.record import Record
from fmq.message import Message
from fmq.topic_config import DELETED, TopicConfig
from tests.native.twins import compiled, outcome

CONFIG = BrokerConfig(segment_size=64 * 1024, max_message_size=4096)
TOPICS = st.sampled_from(["a", "b", "c", "%RETRY%g", "", "x" * 300])
HOSTILE = st.sampled_from([None, 0, -1, 2**70, b"bytes", ["x"], 1.5, {"k": 3}, "é"])


@pytest.fixture(scope="module")
def fast():
    return compiled("fmq.engine._queue_placement_c")


@st.composite
def messages(draw) -> Message:
    """Mostly good messages; some with a field of the wrong type or out of range."""
    m = Message(draw(TOPICS), draw(st.binary(max_size=300)),
                key=draw(st.none() | st.text(max_size=10)),
                tags=draw(st.none() | st.text(max_size=10)),
                properties=draw(st.none() | st.dictionaries(st.text(max_size=5),
                                                            st.text(max_size=5), max_size=2)),
                queue_id=draw(st.none() | st.integers(-2, 9)))
    if draw(st.integers(0, 4)) == 0:
        setattr(m, draw(st.sampled_from(["topic", "body", "key", "tags", "properties",
                                         "queue_id"])), draw(HOSTILE))
    if draw(st.integers(0, 9)) == 0:
        m.body = b"x" * 5000  # over max_message_size
    return m


@st.composite
def queue_states(draw) -> dict:
    """What a broker opens its queues with: counts, next offsets, topic settings."""
    topics = [TopicConfig(name, draw(st.integers(1, 8)),
                          max_message_size=draw(st.none() | st.integers(0, 400)),
                          state=draw(st.sampled_from(["created", DELETED])))
              for name in draw(st.lists(st.sampled_from(["a", "b"]), unique=True))]
    nexts = draw(st.dictionaries(st.tuples(TOPICS, st.integers(0, 5)), st.integers(0, 100),
                                 max_size=4))
    return {"queues_per_topic": draw(st.integers(1, 8)), "queue_next": nexts,
            "pending": draw(st.lists(st.tuples(TOPICS, st.integers(0, 9)), max_size=2)),
            "topics": topics, "auto_create": draw(st.booleans())}


def _record(rec: Record) -> tuple:
    return tuple(bytes(v) if isinstance(v, memoryview) else v
                 for v in (getattr(rec, n) for n in Record.__slots__))


def _run(twin, state: dict, batch: list[Message]) -> list:
    """Everything placing ``batch`` one message at a time did and left behind."""
    queues = twin.Queues(**{**state, "queue_next": dict(state["queue_next"])})
    seen: list = [queues.stored_counts()]
    with tempfile.TemporaryDirectory() as directory:
        log_ = Log(directory, CONFIG.segment_size)
        log_.start_at(0)
        try:
            for m in batch:
                checked = outcome(twin.check_messages, [m], CONFIG, queues)
                seen.append(checked)
                if checked[0] != "value":
                    continue
                with log_.lock:
                    reserve_segments(log_, [m])
                    placed = outcome(twin.append_message_locked, log_, queues, m, 1234)
                seen.append(_record(placed[1]) if placed[0] == "value" else placed)
            seen.append(outcome(twin.place_messages, log_, queues,
                                [m for m in batch if seen and _good(twin, m, queues)]))
            seen.append(log_.read(0, log_.next_offset) if log_.next_offset else b"")
        finally:
            log_.close()
    seen += [queues.messages_in, queues.bytes_in, queues.stored_counts(),
             sorted(queues.topic_names(), key=repr),
             {t: queues.queue_count(t) for t in ("a", "b", "c", "")}]
    return seen


def _good(twin, m: Message, queues) -> bool:
    return outcome(twin.check_messages, [m], CONFIG, queues)[0] == "value"


def _comparable(seen: list) -> list:
    """place_messages answers with SendResults and a log offset: equal when alike."""
    return [repr(x) if not isinstance(x, (bytes, dict, list, tuple)) else x for x in seen]


@settings(max_examples=150, deadline=None)
@given(state=queue_states(), batch=st.lists(messages(), max_size=6))
def test_compiled_places_like_pure(fast, state: dict, batch: list[Message]) -> None:
    got_fast, got_pure = _run(fast, state, batch), _run(pure, state, batch)
    # The log bytes hold the store time of place_messages (the clock): compare the rest.
    assert _comparable(got_fast[:-6]) == _comparable(got_pure[:-6])
    assert got_fast[-5:] == got_pure[-5:]


@settings(max_examples=200, deadline=None)
@given(state=queue_states(), m=messages())
def test_queue_choice_alike(fast, state: dict, m: Message) -> None:
    q_fast = fast.Queues(**{**state, "queue_next": dict(state["queue_next"])})
    q_pure = pure.Queues(**{**state, "queue_next": dict(state["queue_next"])})
    for _ in range(3):  # round robin moves on
        assert outcome(q_fast.pick_queue, m) == outcome(q_pure.pick_queue, m)
        assert outcome(q_fast.check_topic, m) == outcome(q_pure.check_topic, m)
    assert outcome(fast.stored_queue_counts, [(m.topic, m.queue_id)]) == \
        outcome(pure.stored_queue_counts, [(m.topic, m.queue_id)])


def test_hostile_arguments_fail_alike(fast) -> None:
    for bad in (None, 5, "text", [None]):
        # A broker's queue state comes from its index, never from a client: broken state
        # fails with the same exception type (the interpreter and Cython word a failed
        # tuple unpacking apart). A client's messages are compared message for message.
        for args in ((bad, {}), (1, bad), (1, {}, bad), (1, {}, (), bad)):
            assert outcome(lambda *a: vars(fast.Queues(*a)), *args)[:2] == \
                outcome(lambda *a: vars(pure.Queues(*a)), *args)[:2], args
        assert outcome(fast.stored_queue_counts, [bad])[:2] == \
            outcome(pure.stored_queue_counts, [bad])[:2]
        qf, qp = fast.Queues(1, {}), pure.Queues(1, {})
        assert outcome(fast.check_messages, bad, CONFIG, qf) == \
            outcome(pure.check_messages, bad, CONFIG, qp)
        assert outcome(fast.check_messages, [Message("t", b"")], bad, qf) == \
            outcome(pure.check_messages, [Message("t", b"")], bad, qp)
        assert outcome(qf.advance, "t", bad, 0) == outcome(qp.advance, "t", bad, 0)


def test_the_seat_runs_the_compiled_twin_unless_told_not_to(fast) -> None:
    want = pure if native.no_extensions() else fast
    assert seat.PLACEMENT_MODULE is want
    assert all(chosen is getattr(want, name) for name, (_ref, chosen) in seat.TWINS.items())
