"""The compiled index-entry derivation (``fmq.index._derive_c``) against the pure module it
is compiled from (``fmq.index.derive``): the same entries (the very same classes) for every
record type, the same error (type and message) for hostile records, and the one seat
choosing them (``fmq.index.entries``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.index import derive as pure
from fmq.index import entries
from fmq.log.record import Record, RecordType
from tests.log.test_twins import records
from tests.native.twins import compiled, outcome

FUNCTIONS = ("queue_entry", "tx_end", "offset_entry", "epoch_entry", "topic_entry",
             "index_mark", "timer_changes", "index_items")
#: What a hostile record may hold in place of a field: wrong types, huge numbers.
HOSTILE = st.sampled_from([None, 0, -1, 2**70, "text", b"bytes", ["x"], 1.5, {"k": 3}])
FIELDS = ("type", "log_offset", "queue_id", "queue_offset", "ref_offset", "ref_size", "topic",
          "tx_id", "producer_group", "key", "tags", "properties", "size")


@pytest.fixture(scope="module")
def fast():
    return compiled("fmq.index._derive_c")


def _typed(got: tuple) -> tuple:
    """An outcome with each entry's class kept (a NamedTuple equals any equal tuple)."""
    if got[0] == "value":
        value = got[1]
        if isinstance(value, tuple):
            return ("value", type(value), tuple((type(v), v) if isinstance(v, tuple) else v
                                                for v in value))
        return ("value", type(value), value)
    return got


@st.composite
def hostile_records(draw) -> Record:
    """A record of any type, with one or two fields replaced by hostile values."""
    rec = draw(records())
    rec.type = draw(st.sampled_from(tuple(RecordType)) | st.integers(-3, 300))
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=2)):
        setattr(rec, name, draw(HOSTILE))
    return rec


@pytest.mark.parametrize("name", FUNCTIONS)
@settings(max_examples=300, deadline=None)
@given(rec=records() | hostile_records())
def test_compiled_equals_pure(fast, name: str, rec: Record) -> None:
    assert _typed(outcome(getattr(fast, name), rec)) == _typed(outcome(getattr(pure, name), rec))


@settings(max_examples=200, deadline=None)
@given(tags=st.none() | st.text(max_size=40) | HOSTILE)
def test_tag_hash_alike(fast, tags) -> None:
    assert outcome(fast.tag_hash, tags) == outcome(pure.tag_hash, tags)


@settings(max_examples=200, deadline=None)
@given(recs=st.lists(records(), max_size=8), extra=st.lists(HOSTILE, max_size=2))
def test_sort_items_files_alike(fast, recs: list[Record], extra: list) -> None:
    items = tuple(i for r in recs for i in pure.index_items(r)) + tuple(extra)
    out = []
    for twin in (pure, fast):
        lists: tuple[list, list, list] = ([], [], [])
        got = outcome(twin.sort_items, items, *lists)
        out.append((got, [[(type(v), v) for v in lst] for lst in lists]))
    assert out[0] == out[1]
    for bad in (None, 5, [b"x"]):
        assert outcome(fast.sort_items, bad, [], [], []) == \
            outcome(pure.sort_items, bad, [], [], [])


def test_the_seat_runs_the_compiled_twin_unless_told_not_to(fast) -> None:
    assert set(entries.TWINS) == {*FUNCTIONS, "tag_hash", "sort_items"}
    from fmq import native
    want = pure if native.no_extensions() else fast
    assert entries.DERIVE_MODULE is want
    assert all(chosen is getattr(want, name) for name, (_ref, chosen) in entries.TWINS.items())
    # Both make the package's own entry classes.
    rec = Record(RecordType.MESSAGE, topic="t", queue_id=1, queue_offset=2, body=b"x")
    assert type(fast.queue_entry(rec)) is entries.QueueEntry
