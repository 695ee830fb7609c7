"""A PULL answer's messages written in C (``fmq.server.ops._pull_messages_c``) against their
reference (``fmq.server.ops.pull_messages``: a pull's decode of each record, then the
answer's encoding of each message, fitted to the budget): for records as the log stores
them, the same bytes, message count, body bytes, next offset and messages handed to the
cache, or the same error (type and message), for any keys, tags, properties (the dedup
window's own, names given twice), bodies (empty, large), store times, offsets, record types
(a transaction's PRE_MESSAGE that a REF_MESSAGE's entry points to, a TX_MESSAGE), messages
kept encoded, budgets, and for damaged records (a byte changed, with and without the CRC
made right again, truncated, at another log offset), deleted ones (None) and other inputs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.engine.reads import stored_message
from fmq.log.record import RecordType
from fmq.log.record.layout import HEADER_SIZE
from fmq.message import PRINCIPAL_PROPERTY, PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY
from fmq.protocol.schema import STORED_MESSAGE
from fmq.protocol.values import stored_to_wire
from fmq.server.ops import pull_messages as P
from fmq.server.ops.pull_answers import encode_stored
from tests.native.stored_records import DAMAGES, damaged_records, record_bytes
from tests.native.twins import compiled, outcome

LIMIT = 1 << 20
TEXT = st.text(max_size=8)
PROPERTIES = st.none() | st.lists(st.tuples(
    st.sampled_from([PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY, PRINCIPAL_PROPERTY, "h", "é",
                     ""]) | TEXT,
    st.sampled_from(["", "1", "é", "x" * 40]) | TEXT), max_size=4)
KINDS = st.sampled_from([RecordType.MESSAGE] * 4 + [RecordType.PRE_MESSAGE,
                                                   RecordType.TX_MESSAGE])
BODIES = st.binary(max_size=40) | st.just(b"") | st.just(b"B" * 70_000)
#: (queue offset gap, body, key, properties, store time, tags, record type, kept encoded)
MESSAGE = st.tuples(st.integers(0, 3), BODIES, st.none() | st.just("") | TEXT, PROPERTIES,
                    st.sampled_from([0, 1_700_000_000_000, -1, 2**62, 2**63 - 1]),
                    st.none() | st.just("") | TEXT, KINDS, st.booleans())
TOPICS = st.sampled_from(["t", "é-topic", "x" * 200])


@pytest.fixture(scope="module")
def module():
    return compiled("fmq.server.ops._pull_messages_c")


@pytest.fixture(scope="module")
def build_c(module):
    return module.PullMessages(P.reference_pull_messages).build


def _stored(rows, topic: str = "t", base: int = 5) -> tuple[list, list]:
    """(index entries, what a pull's read hands over per entry) of ``rows``: the record's
    bytes, or the message kept encoded (as the server's cache holds it) where asked and
    the record decodes."""
    entries, records = [], []
    offset, log_offset = base, 4096
    for gap, body, key, properties, store_time, tags, kind, kept in rows:
        offset += gap
        data = record_bytes(kind, log_offset, offset, body, key, properties, store_time, tags)
        entry = (offset, log_offset, len(data), 0, store_time)
        entries.append(entry)
        if kept:
            try:
                m = stored_message(topic, 0, entry, data, LIMIT)
                records.append((encode_stored(m), len(m.body)))
            except Exception:  # noqa: BLE001 - not kept: the record as it is
                records.append(data)
        else:
            records.append(data)
        log_offset += len(data)
    return entries, records


def _both(build_c, topic, entries, records, budget=LIMIT, limit=LIMIT, queue_id=0):
    fresh_c: list = []
    fresh_r: list = []
    fast = outcome(build_c, topic, queue_id, entries, records, budget, limit, fresh_c)
    reference = outcome(P.reference_pull_messages, topic, queue_id, entries, records, budget,
                        limit, fresh_r)
    return (fast, fresh_c), (reference, fresh_r)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(MESSAGE, min_size=1, max_size=6), base=st.integers(0, 2**40),
       topic=TOPICS, budget=st.sampled_from([0, 50, 200, 1000, 80_000, LIMIT]),
       queue_id=st.sampled_from([0, 7, 0xFFFF_FFFF]))
def test_stored_records_give_the_same_answer(build_c, rows, base, topic, budget, queue_id):
    entries, records = _stored(rows, topic, base)
    fast, reference = _both(build_c, topic, entries, records, budget, queue_id=queue_id)
    assert fast == reference


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(MESSAGE, min_size=1, max_size=3), data=st.data(),
       how=st.sampled_from([*DAMAGES, "kept odd", "entry odd"]))
def test_damaged_or_odd_records_fail_or_pass_alike(build_c, rows, data, how):
    entries, records = _stored(rows)
    i = data.draw(st.integers(0, len(records) - 1))
    record = records[i]
    if type(record) is tuple:
        record = record_bytes(RecordType.MESSAGE, entries[i][1], entries[i][0], b"k", None,
                              None, entries[i][4], None)
        entries[i] = entries[i][:2] + (len(record),) + entries[i][3:]
    if how == "kept odd":
        records[i] = data.draw(st.sampled_from([(b"x",), (b"x", "1"), ("x", 1), (b"", 0),
                                                (bytearray(b"x"), 1)]))
    elif how == "entry odd":
        qoff, doff, size, th, st_ = entries[i]
        entries[i] = data.draw(st.sampled_from([
            (qoff, doff, size, th), [qoff, doff, size, th, st_], (-1, doff, size, th, st_),
            (qoff, doff, size, th, 2**63), (qoff, doff, size, th, "1"),
            (2**64, doff, size, th, st_), (float(qoff), doff, size, th, st_)]))
    else:
        records = damaged_records(data, how, entries, records, i, record)
    fast, reference = _both(build_c, "t", entries, records)
    assert fast == reference


def test_the_common_records_are_written_in_c_and_read_back(module):
    """Messages as producers send them (keys, tags, properties, the dedup window's own,
    empty and large bodies, a transaction's PRE_MESSAGE), one kept encoded: written without
    the reference, read back by the schema's codec as the pull's decode gives them, and
    the ones encoded from records handed to the cache."""
    def refused(*args):
        raise AssertionError(f"the reference was asked: {args!r}")
    rows = [(0, b"v" * 100, None, None, 5, None, RecordType.MESSAGE, False),
            (1, b"", "k", [("h", "text"), ("é", "ü")], 7, "tag", RecordType.MESSAGE, False),
            (2, b"w", "é", [(PRODUCER_ID_PROPERTY, "p"), (SEQUENCE_PROPERTY, "3"),
                            ("a", "b")], 9, None, RecordType.PRE_MESSAGE, False),
            (1, b"z" * 70_000, None, [(SEQUENCE_PROPERTY, "4")], 11, "x||y",
             RecordType.TX_MESSAGE, False),
            (1, b"kept", "k2", None, 13, None, RecordType.MESSAGE, True)]
    entries, records = _stored(rows, base=10)
    assert type(records[-1]) is tuple
    fresh: list = []
    data, count, body_bytes, resume = module.PullMessages(refused).build(
        "t", 3, entries, records, LIMIT, LIMIT, fresh)
    assert (count, body_bytes, resume) == (5, 70_105, entries[-1][0] + 1)
    assert [(e, f) for e, f, _b in fresh] == [
        (entries[i], encode_stored(stored_message("t", 3, entries[i], records[i], LIMIT)))
        for i in range(4)]
    view = memoryview(data)
    pos = 0
    for i, entry in enumerate(entries):
        got, pos = STORED_MESSAGE.decode(view, pos)
        if i < 4:
            assert got == stored_to_wire(stored_message("t", 3, entry, records[i], LIMIT))
    assert pos == len(data)
    assert got["body"] == b"kept" and got["key"] == "k2"
    hidden = STORED_MESSAGE.decode(view, len(fresh[0][1]) + len(fresh[1][1]))[0]
    assert hidden["properties"] == {"a": "b"}  # %producer there: %seq left out too


def test_a_budget_cuts_where_the_reference_cuts(module):
    """At least one message whatever the budget; then while they fit; the next offset is
    the first left out, and only the messages in the answer go to the cache."""
    rows = [(1, b"x" * 100, None, None, 5, None, RecordType.MESSAGE, False)] * 4
    entries, records = _stored(rows, base=0)
    one = P.reference_pull_messages("t", 0, entries, records, LIMIT, LIMIT, None)
    size = len(one[0]) // 4
    for budget in (0, size - 1, size, 2 * size, 3 * size + 1, 4 * size):
        fresh: list = []
        data, count, _bodies, resume = module.PullMessages(
            P.reference_pull_messages).build("t", 0, entries, records, budget, LIMIT, fresh)
        want = max(1, min(4, budget // size))
        assert count == want and len(data) == want * size and len(fresh) == want
        assert resume == (entries[want][0] if want < 4 else entries[-1][0] + 1)


def test_other_inputs_go_to_the_reference(build_c):
    entries, records = _stored([(0, b"v", None, None, 1, None, RecordType.MESSAGE, False)])
    for args in (("t", 0, entries, [bytearray(records[0])], 10, LIMIT, None),
                 ("t", 0, [], [], 10, LIMIT, None),
                 ("t", 0, entries, records, "10", LIMIT, None),
                 ("t", 0, entries, records, 2**63, LIMIT, None),
                 ("t", -1, entries, records, 10, LIMIT, None),
                 ("t", 2**32, entries, records, 10, LIMIT, None),
                 ("t", 0, entries, records + records, 10, LIMIT, None),
                 ("t", 0, (entries[0],), records, 10, LIMIT, None),
                 ("t", 0, entries, records, 10, LIMIT, ()),
                 ("x" * 70_000, 0, entries, records, 10, LIMIT, None),
                 ("\ud800", 0, entries, records, 10, LIMIT, None),
                 (b"t", 0, entries, records, 10, LIMIT, None)):
        assert outcome(build_c, *args) == outcome(P.reference_pull_messages, *args)


def test_keys_and_tags_the_wire_cannot_carry_fail_alike(build_c):
    """A key or tags of 65,535 bytes fits a record but not the wire's optional text."""
    for key, tags in (("k" * 0xFFFF, None), (None, "t" * 0xFFFF), ("k" * 0xFFFE, None)):
        entries, records = _stored([(0, b"v", key, None, 1, tags, RecordType.MESSAGE,
                                     False)])
        fast, reference = _both(build_c, "t", entries, records)
        assert fast == reference
        assert (fast[0][0] == "raised") == (0xFFFF in (len(key or ""), len(tags or "")))


def test_a_record_longer_than_the_limit_fails_alike(build_c):
    entries, records = _stored([(0, b"v" * 200, None, None, 1, None, RecordType.MESSAGE,
                                 False)])
    for limit in (HEADER_SIZE, len(records[0]) - 1, len(records[0])):
        fast, reference = _both(build_c, "t", entries, records, limit=limit)
        assert fast == reference


#: Records the C path takes whole: unique property names, keys and tags the wire carries.
PLAIN = st.tuples(st.integers(0, 3), BODIES, st.none() | TEXT,
                  st.dictionaries(st.sampled_from([PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY,
                                                   PRINCIPAL_PROPERTY, "h"]) | TEXT,
                                  TEXT, max_size=4).map(lambda d: list(d.items()) or None),
                  st.integers(0, 2**63 - 1), st.none() | TEXT, KINDS, st.booleans())


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(PLAIN, min_size=1, max_size=6), base=st.integers(0, 2**40),
       budget=st.integers(0, 200_000))
def test_well_formed_records_never_reach_the_reference(module, rows, base, budget):
    def refused(*args):
        raise AssertionError("the reference was asked")
    entries, records = _stored(rows, "t", base)
    fresh_c: list = []
    fresh_r: list = []
    assert module.PullMessages(refused).build("t", 0, entries, records, budget, LIMIT,
                                              fresh_c) == \
        P.reference_pull_messages("t", 0, entries, records, budget, LIMIT, fresh_r)
    assert fresh_c == fresh_r
