"""The compiled queue-entry items (``fmq.index._item_batch_c``, Cython with its bytes packed
in C) against their reference (``fmq.index.item_batch``, each entry's items from
``fmq.index.keys.entry_items``): the same items byte for byte and the same queue bounds for
any batch, and the same error (type and message) for entries the index cannot store."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.index import item_batch as reference
from fmq.index import keys as K
from fmq.index import store
from fmq.index.entry_types import QueueEntry
from tests.native.twins import compiled, outcome

TEXT = st.text(max_size=12)
#: Numbers at and around every field's edges: u32, u64, the signed i64 fields.
EDGES = st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64,
                         -1, -(2**63), -(2**63) - 1])
#: What a hostile entry may hold in place of a field.
HOSTILE = st.sampled_from([None, -1, 2**70, 1.5, "text", b"bytes", True, "\ud800", ["x"]])


@st.composite
def entries(draw) -> QueueEntry:
    return QueueEntry(
        draw(st.sampled_from(["orders", "billing", "zäh"]) | TEXT),
        draw(st.integers(0, 7) | st.integers(0, 2**32 - 1)),
        draw(st.integers(0, 1000) | st.integers(0, 2**63 - 1)),
        draw(st.integers(0, 2**64 - 1)),
        draw(st.integers(0, 2**32 - 1)),
        draw(st.integers(0, 2**32 - 1)),
        draw(st.integers(-(2**63), 2**63 - 1) | st.just(0)),
        draw(st.none() | st.just("") | TEXT),
        draw(st.integers(0, 2**64 - 1)),
    )


@st.composite
def hostile_entries(draw) -> tuple:
    """An entry with one or two fields replaced by edge numbers or values of other types
    (or not an entry at all)."""
    fields = list(draw(entries()))
    for i in draw(st.lists(st.integers(0, 8), min_size=1, max_size=2)):
        fields[i] = draw(EDGES | HOSTILE)
    shape = draw(st.sampled_from(["entry", "tuple", "list", "short"]))
    if shape == "entry":
        return QueueEntry(*fields)
    if shape == "list":
        return fields
    return tuple(fields[:8] if shape == "short" else fields)


@pytest.fixture(scope="module")
def fast():
    return compiled("fmq.index._item_batch_c")


@settings(max_examples=200, deadline=None)
@given(batch=st.lists(entries(), max_size=20))
def test_compiled_items_equal_the_reference(fast, batch: list) -> None:
    assert fast.item_batch(batch) == reference.item_batch(batch)


@settings(max_examples=200, deadline=None)
@given(batch=st.lists(entries() | hostile_entries(), min_size=1, max_size=6))
def test_compiled_fails_as_the_reference_fails(fast, batch: list) -> None:
    assert outcome(fast.item_batch, batch) == outcome(reference.item_batch, batch)


def test_the_reference_is_entry_items_database_by_database() -> None:
    batch = [QueueEntry("orders", 1, 5, 100, 64, 7, 1_700_000, "k1", 100),
             QueueEntry("orders", 1, 3, 164, 64, 0, -5, None, 164),
             QueueEntry("billing", 0, 0, 228, 70, 0, 0, "", 228)]
    cq, times, keys, keyoff, bounds = reference.item_batch(batch)
    by_db: dict[int, list] = {K.DB_CQ: [], K.DB_TIME: [], K.DB_KEYS: [], K.DB_KEYOFF: []}
    for e in batch:
        for db, k, v in K.entry_items(e):
            by_db[db].append((k, v))
    assert (cq, times, keys, keyoff) == (by_db[K.DB_CQ], by_db[K.DB_TIME], by_db[K.DB_KEYS],
                                         by_db[K.DB_KEYOFF])
    assert bounds == {("orders", 1): [3, 6], ("billing", 0): [0, 1]}


def test_the_store_runs_the_chosen_twin(fast) -> None:
    from fmq import native
    expected = reference.item_batch if native.no_extensions() else fast.item_batch
    assert store.ITEM_BATCH is expected
