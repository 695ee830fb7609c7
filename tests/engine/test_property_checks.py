"""A message's properties are checked on a short path when they are a few ASCII strings
(fmq/message.py) and bounded instead of measured when the log sizes a record
(fmq/log/record/sizes.py, fmq/log/placement.py): the same messages pass and fail as under
the full checks, and the records stored are the same bytes."""

from __future__ import annotations

import pytest

import fmq
from fmq.errors import InvalidArgument, MessageTooLarge
from fmq.log.record import HEADER_SIZE, encoded_size, properties_length
from fmq.message import (
    MAX_PROPERTIES,
    Message,
    _check_properties,
    check_message,
    plain_properties,
)


class _Str(str):
    pass


class _Dict(dict):
    pass


#: Property maps of every shape: the short path takes some, the full checks the rest.
SHAPES = [
    {},
    {"CreateTime": "1732838400000"},
    {"a": "1", "b": "", "": "x"},
    {"k\x00": "v\n"},  # control characters are allowed in properties
    {"caf\u00e9": "1"},  # not ASCII: measured encoded
    {"a": "\u00e9" * 40_000},  # not ASCII and over the limit once encoded
    {"a": "x" * (MAX_PROPERTIES - 7)},  # exactly the limit
    {"a": "x" * (MAX_PROPERTIES - 6)},  # one byte over
    {f"p{i}": "v" for i in range(0x10000)},  # more than a count field holds
    {f"p{i}": "v" * 1000 for i in range(66)},  # many, over the limit
    {"a": 1},
    {1: "a"},
    {_Str("a"): "b"},
    _Dict(a="b"),
    [("a", "b")],
    {"%RECONSUME_TIMES": "1"},
    {"%producer": "p", "%seq": "1"},
    {"%producer": "p"},
    {"%msgid": ""},
    {"x": "\ud800"},  # a lone surrogate: not UTF-8
]


def _outcome(call) -> tuple[type | None, str]:
    try:
        call()
    except (InvalidArgument, UnicodeEncodeError) as exc:
        return type(exc), str(exc)
    return None, ""


@pytest.mark.parametrize("internal", [False, True])
@pytest.mark.parametrize("properties", SHAPES)
def test_the_short_path_passes_only_what_the_full_checks_pass(properties, internal):
    msg = Message("t", b"x", properties=properties)
    full = _outcome(lambda: _check_properties(properties, internal))
    assert _outcome(lambda: check_message(msg, 1024, 4, internal=internal)) == full
    if plain_properties(properties):
        assert full == (None, "")
    if plain_properties(properties) and properties:
        assert 2 + sum(4 + len(k) + len(v) for k, v in properties.items()) == (
            properties_length(properties))


def test_the_property_limit_holds_on_the_short_path():
    at_limit = {"a": "x" * (MAX_PROPERTIES - 7)}
    assert properties_length(at_limit) == MAX_PROPERTIES and plain_properties(at_limit)
    check_message(Message("t", b"", properties=at_limit), 1024, 4)
    with pytest.raises(InvalidArgument, match="properties take 65537 bytes"):
        check_message(Message("t", b"", properties={"a": "x" * (MAX_PROPERTIES - 6)}), 1024, 4)


def _config(segment_size: int) -> fmq.BrokerConfig:
    return fmq.BrokerConfig(segment_size=segment_size, max_message_size=4096,
                            checkpoint_interval_ms=0, retention_interval_ms=0)


def test_a_record_too_large_only_by_its_properties_is_refused_and_one_byte_less_is_stored(
        tmp_path):
    segment_size = 64 * 1024
    with fmq.Broker.open(str(tmp_path), _config(segment_size)) as broker:
        def fitting(extra: int) -> Message:
            # Exactly as large as a segment takes (with its end filler), plus ``extra``.
            m = Message("t", b"b" * 100, key="k", properties={"a": ""})
            room = segment_size - HEADER_SIZE - encoded_size(m)
            return Message("t", b"b" * 100, key="k", properties={"a": "v" * (room + extra)})

        before = broker.stats()["log_end"]
        with pytest.raises(MessageTooLarge):
            broker.send(fitting(1))
        assert broker.stats()["log_end"] == before
        m = fitting(0)
        result = broker.send(m)
        assert broker.wait_indexed()
        got = broker.reads.pull("t", result.queue_id, result.queue_offset)[0]
        assert got.properties == m.properties and got.body == m.body


def test_batches_with_properties_roll_segments_and_read_back(tmp_path):
    # Each batch's rough bound (64 KiB per message with properties) exceeds these segments,
    # so every reservation sizes its records exactly, across many segment ends.
    with fmq.Broker.open(str(tmp_path), _config(16 * 1024)) as broker:
        sent = []
        for i in range(40):
            batch = [Message("t", b"%d" % i * 300, properties={"CreateTime": str(i), "j": str(j)},
                             queue_id=0) for j in range(3)]
            broker.send_batch(batch)
            sent += batch
        assert broker.wait_indexed()
        got = []
        offset = 0
        while len(got) < len(sent):
            page = broker.reads.pull("t", 0, offset, max_messages=64)
            assert page, "the queue ended before every message was read"
            got += page
            offset += len(page)
        assert [(g.body, g.properties) for g in got] == [(s.body, s.properties) for s in sent]
