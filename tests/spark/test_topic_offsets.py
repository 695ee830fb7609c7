"""The position rules of the topic source without a server: option parsing and the
``maxMessagesPerTrigger`` cut (the parts that need a server are in test_topic_source
and test_topic_stream)."""

from __future__ import annotations

import pytest

from fmq.errors import InvalidArgument
from fmq.spark.topic_offsets import cap, count, parse_position, parse_start, parse_topics


def test_cap_never_exceeds_the_limit_and_shares_it_fairly():
    start = {"a": {"0": 10, "1": 0, "2": 5}, "b": {"0": 0}}
    end = {"a": {"0": 110, "1": 2, "2": 5}, "b": {"0": 50}}
    out = cap(start, end, 30)
    assert count(start, out) == 30
    # a/1 has only 2 waiting: it takes them and the rest is split between a/0 and b/0.
    assert out == {"a": {"0": 24, "1": 2, "2": 5}, "b": {"0": 14}}
    for t in end:
        for q in end[t]:
            assert start[t][q] <= out[t][q] <= end[t][q]


def test_cap_always_moves_forward_with_a_small_limit():
    start = {"a": {str(q): 0 for q in range(8)}}
    end = {"a": {str(q): 100 for q in range(8)}}
    out = cap(start, end, 3)
    assert count(start, out) == 3
    assert cap(start, end, 10_000) == end


def test_cap_with_nothing_waiting_is_the_start():
    start = {"a": {"0": 4}}
    assert cap(start, {"a": {"0": 4}}, 5) == start


def test_options_parse():
    assert parse_topics({"subscribe": " a, b "}) == ["a", "b"]
    with pytest.raises(InvalidArgument, match="twice"):
        parse_topics({"subscribe": "a,a"})
    assert parse_start({"startingoffsets": "LATEST"}, ["a"], "earliest").kind == "latest"
    assert parse_start({}, ["a"], "earliest").kind == "earliest"
    ts = parse_start({"startingTimestamp": "1700000000000"}, ["a"], "latest")
    assert (ts.kind, ts.timestamp_ms) == ("timestamp", 1700000000000)
    pos = parse_position('{"a": {"0": 5, "2": -2}}', "startingOffsets", ["a", "b"],
                         ("earliest", "latest"), -2)
    assert pos.queues == {"a": {"0": 5, "2": -2}}
    grouped = parse_position('{"a": {"g2/01": 5}}', "startingOffsets", ["a"],
                             ("earliest", "latest"), -2)
    assert grouped.queues == {"a": {"g2/1": 5}}
    for bad in ('{"a": {"x": 1}}', '{"a": {"/1": 1}}', '{"a": {"g2/x": 1}}', '{"a": {"0": -3}}', '{"a": {"0": true}}', '{"a": 3}', "[1]"):
        with pytest.raises(InvalidArgument):
            parse_position(bad, "startingOffsets", ["a"], ("earliest", "latest"), -2)
