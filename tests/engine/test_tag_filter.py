"""Filtered pulls (``reads.pull(tags=...)``, fmq.engine.tag_filter) on the embedded
broker: exactly the messages a tag expression selects, a resume offset past the ones
skipped, the scan limit, the byte budget, and two tags with the same hash."""

from __future__ import annotations

import pytest

from fmq import InvalidArgument, Message
from fmq.engine import tag_filter
from fmq.index.entries import tag_hash
from fmq.message import parse_tag_expression

#: Two tags with the same CRC-32C, so the same hash in the consume queue.
TWIN_A, TWIN_B = "oujaqaegto", "fpyygflzcy"


def drain(broker, queue_id: int, expression: str, max_messages: int = 3):
    """Every message a consumer of ``expression`` gets from the queue, pulling from each
    answer's resume offset, and the offsets it pulled from."""
    got, offsets, offset = [], [], 0
    while True:
        msgs, _lo, _hi, resume = broker.reads.pull_answer("t", queue_id, offset, max_messages,
                                                          tags=expression)
        offsets.append(offset)
        got += msgs
        if resume == offset:
            return got, offsets
        offset = resume


def test_expressions_parse():
    assert parse_tag_expression("a || b") == {"a", "b"}
    assert parse_tag_expression(" a||b ||c ") == {"a", "b", "c"}
    assert parse_tag_expression("*") is None and parse_tag_expression("") is None
    assert parse_tag_expression(None) is None
    for bad in ("a ||", "|| a", "a || || b", "a\x00", 5):
        with pytest.raises(InvalidArgument):
            parse_tag_expression(bad)


def test_exactly_the_matching_messages_across_queues(broker):
    tags = ["a", "b", "c", None, "a b", "A"]
    sent = [(broker.send(Message("t", b"%d" % i, tags=tags[i % 6])), tags[i % 6])
            for i in range(60)]
    broker.wait_indexed()
    for expression, wanted in (("a || b", {"a", "b"}), ("c", {"c"}), ("*", set(tags))):
        got = []
        for qid in range(broker.topics.queue_count("t")):
            msgs, _offsets = drain(broker, qid, expression)
            got += msgs
        assert sorted(m.offset for m in got) == sorted(
            r.offset for r, t in sent if t in wanted)


def test_the_resume_offset_passes_what_was_skipped(broker):
    for _ in range(10):
        broker.send(Message("t", b"skip", tags="x", queue_id=0))
    hit = broker.send(Message("t", b"hit", tags="y", queue_id=0))
    for _ in range(5):
        broker.send(Message("t", b"skip", tags="x", queue_id=0))
    broker.wait_indexed()
    msgs, _lo, _hi, resume = broker.reads.pull_answer("t", 0, 0, tags="y")
    assert [m.offset for m in msgs] == [hit.offset]
    assert resume == 16  # the whole queue examined
    again = broker.reads.pull_answer("t", 0, resume, tags="y")
    assert (again.messages, again.resume_offset) == ([], 16)


def test_a_long_run_of_other_tags_is_walked_in_steps(broker, monkeypatch):
    monkeypatch.setattr(tag_filter, "SCAN_LIMIT", 7)
    broker.send_batch([Message("t", b"n", tags="x", queue_id=0) for _ in range(20)])
    hit = broker.send(Message("t", b"hit", tags="y", queue_id=0))
    broker.wait_indexed()
    msgs, offsets = drain(broker, 0, "y")
    assert [m.offset for m in msgs] == [hit.offset]
    assert offsets[:4] == [0, 7, 14, 21]  # empty answers, each a step further


def test_the_byte_budget_stops_and_resumes(broker):
    bodies = [b"%d" % i * 500 for i in range(6)]
    for b in bodies:
        broker.send(Message("t", b, tags="y", queue_id=0))
    broker.wait_indexed()
    msgs, _lo, _hi, resume = broker.reads.pull_answer("t", 0, 0, 10, max_bytes=1500, tags="y")
    assert 1 <= len(msgs) < 6 and resume == msgs[-1].queue_offset + 1
    rest = broker.reads.pull("t", 0, resume, 10, tags="y")
    assert [m.body for m in msgs + rest] == bodies


def test_tags_sharing_a_hash_are_told_apart(broker):
    assert tag_hash(TWIN_A) == tag_hash(TWIN_B)
    for i in range(6):
        broker.send(Message("t", b"%d" % i, tags=(TWIN_A, TWIN_B)[i % 2], queue_id=0))
    broker.wait_indexed()
    msgs, _lo, _hi, resume = broker.reads.pull_answer("t", 0, 0, 10, tags=TWIN_A)
    assert [m.body for m in msgs] == [b"0", b"2", b"4"] and resume == 6
