"""Errors keep their class, message and fields through an error response."""

from __future__ import annotations

import pytest

from fmq.errors import (
    AccessDenied,
    BadRecord,
    CorruptLog,
    DataDirLocked,
    DeniedByRule,
    FMQError,
    GroupHasMembers,
    GroupProtocolConflict,
    GroupProtocolUnchecked,
    IncompleteRecord,
    LeadershipLost,
    LogFailed,
    NotEnoughReplicas,
    NotHosted,
    NotPrimary,
    OffsetNotReplicated,
    OutOfOrderSequence,
    ReplicaBehindRetention,
    ReplicaDiverged,
    RouteConflict,
    RouteHasLag,
    SegmentUnavailable,
    StalePrimary,
    TopicExists,
    TopicHasLag,
    UnknownBrokerGroup,
    UnknownTopic,
    all_error_classes,
)
from fmq.protocol import decode_error, encode_error, parse_frame

#: One instance of every error class with fields, with awkward field text (the format's own
#: words, colons, newlines, negative offsets).
WITH_FIELDS = [
    GroupProtocolConflict("billing", 2),
    DataDirLocked("/var/lib/fmq in use by another FMQ process; stop"),
    LogFailed(OSError(28, "No space left on device")),
    LogFailed("the log is closed"),
    SegmentUnavailable("/d/log/00000000000000004096.seg", OSError(24, "Too many open files")),
    CorruptLog("00000000000000000000.seg", 123456, "CRC-32C mismatch"),
    CorruptLog("a at log offset 7: b.seg", 9, "reason: with. Valid records follow it\nx"),
    IncompleteRecord(77, "length 90 but only 3 bytes follow"),
    BadRecord(-1, "record claims log offset 5: bad record at log offset 6"),
    GroupHasMembers("orders has 2 live members: x", 3),
    NotPrimary("10.0.0.1:9876"),
    NotEnoughReplicas(0, 2),
    OffsetNotReplicated(25, 20),
    ReplicaBehindRetention(4096, 1 << 40),
    ReplicaDiverged(77, 12),
    StalePrimary(3, 4),
    LeadershipLost(""),
    LeadershipLost("10.0.0.1:9876"),
    OutOfOrderSequence("p-1 is more than 3 below", 12, 9000, 10_000),
    AccessDenied("produce", "topic 'a on b is not allowed: c'"),
    DeniedByRule("produce", "topic 'orders.secret'", "deny * produce on topic 'orders.secret'"),
    UnknownTopic("orders.eu:x|y"),
    TopicExists("a-b_c"),
    TopicHasLag("orders", "group billing queue 0: 3 unread, group x (y) queue 2: 1 unread"),
    UnknownBrokerGroup("g3", "prod", "g1, g2"),
    UnknownBrokerGroup("g.x:y", "c (1)", "none yet"),
    RouteConflict("orders", "broker group a holds queues of it already"),
    RouteConflict("t", "reason: with a colon; and (its groups: a, b)"),
    RouteHasLag("orders", "g1", "billing: 3 unread, audit: 1 unread"),
    NotHosted("orders", "g1", 7, 123),
    NotHosted("a.b:c (d)", "g-2", 0, 0),
    GroupProtocolUnchecked("billing", "g2", "cannot connect to FMQ server 127.0.0.1:1 "
                           "([Errno 111] Connection refused); check: it runs"),
    GroupProtocolUnchecked("a (b): c", "(not known yet)", "this node has not read it yet"),
]


def round_trip(exc: BaseException) -> FMQError:
    data = encode_error(4, 9, exc)
    return decode_error(parse_frame(data[4:]))


def test_every_error_class_with_fields_is_covered_here():
    covered = {type(e) for e in WITH_FIELDS}
    assert {cls for cls in all_error_classes().values() if cls.fields} <= covered


@pytest.mark.parametrize("exc", WITH_FIELDS, ids=lambda e: type(e).__name__)
def test_an_error_with_fields_comes_back_with_the_same_class_message_and_fields(exc):
    back = round_trip(exc)
    assert type(back) is type(exc)
    assert str(back) == str(exc)
    assert back.retriable == exc.retriable
    for name, kind in type(exc).fields.items():
        sent = getattr(exc, name)
        got = getattr(back, name)
        assert isinstance(got, kind)
        if kind is OSError:  # the cause travels as the text the message shows
            assert str(got) == (sent.strerror or str(sent))
        else:
            assert got == (sent if isinstance(sent, kind) else kind(str(sent)))


def test_an_offset_field_is_an_int_again():
    back = round_trip(CorruptLog("00000000000000000000.seg", 4096, "CRC-32C mismatch"))
    assert (back.segment, back.offset, back.reason) == (
        "00000000000000000000.seg", 4096, "CRC-32C mismatch")


def test_a_message_not_in_the_class_format_keeps_its_text_and_has_empty_fields():
    exc = CorruptLog.__new__(CorruptLog)
    Exception.__init__(exc, "written by hand")
    back = round_trip(exc)
    assert type(back) is CorruptLog and str(back) == "written by hand"
    assert (back.segment, back.offset, back.reason) == (None, None, None)


def test_an_error_is_found_inside_a_traceback_with_its_fields():
    from fmq.protocol.error_fields import find_error

    exc = CorruptLog("a at log offset 7: b.seg", 9, "reason: with. Valid records follow it\nx")
    text = f"Traceback (most recent call last):\n  ...\nfmq.errors.CorruptLog: {exc}\n\tat org..."
    found = find_error(CorruptLog, text)
    assert type(found) is CorruptLog and str(found) == str(exc)
    assert (found.segment, found.offset, found.reason) == (exc.segment, 9, exc.reason)
    assert find_error(CorruptLog, text[: text.index("--cut-at")]) is None  # cut short: not it
    with pytest.raises(ValueError):  # a message ending with a field has no known end
        find_error(IncompleteRecord, text)
