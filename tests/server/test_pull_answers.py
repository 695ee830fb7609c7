"""PULL answers built from messages encoded once: the same bytes as encoding them in the
answer, the same fitting of the reply budget, and a second pull copies the bytes without
reading or decoding the records again (the one cache of pulled messages)."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

import fmq
from fmq.engine import reads as reads_module
from fmq.errors import ProtocolError
from fmq.message import Message, StoredMessage
from fmq.protocol import Op
from fmq.protocol.frame import encode_response
from fmq.protocol.schema import STORED_MESSAGE
from fmq.protocol.values import stored_to_wire
from fmq.server.net.replies import fit
from fmq.server.ops import pull_reads
from fmq.server.ops.pull_answers import (
    CLOSE_S,
    SHARED_S,
    SharedQueues,
    encode_fitting,
    encode_stored,
    encoded_cache,
)
from fmq.server.ops.pull_reads import pull_now


def _messages(n: int) -> list[StoredMessage]:
    rnd = random.Random(11)
    return [StoredMessage(
        "topic-\u00e9", rnd.randint(0, 7), 100 + i, 5000 + 1100 * i, bytes(rnd.randint(0, 2000)),
        rnd.choice([None, "", "k\u00e9y"]), rnd.choice([None, "tag"]),
        {f"p{j}": "v" * rnd.randint(0, 30) for j in range(rnd.randint(0, 3))},
        rnd.randint(0, 1 << 41)) for i in range(n)]


def test_the_answer_has_the_bytes_of_encoding_every_message_in_it():
    msgs = _messages(60)
    cache = encoded_cache()
    for budget in (1, 500, 5_000, 20_000, 10**9):
        items, count, size = encode_fitting(cache, msgs, budget)
        fitted, fitted_size = fit(msgs, budget)  # the generic sizing it replaces
        assert (count, size) == (len(fitted), fitted_size) and count >= 1
        expect = encode_response(Op.PULL, 7, {
            "messages": [stored_to_wire(m) for m in fitted], "min_offset": 3,
            "next_offset": 9})
        assert encode_response(Op.PULL, 7, {"messages": items, "min_offset": 3,
                                            "next_offset": 9}) == expect


def test_a_second_pull_of_the_same_messages_copies_their_bytes():
    msgs = _messages(10)
    cache = encoded_cache()
    first, _, _ = encode_fitting(cache, msgs, 10**9)
    assert len(cache) == 10
    again = [dataclasses.replace(m) for m in msgs]  # another pull's objects, equal messages
    second, _, _ = encode_fitting(cache, again, 10**9)
    assert second.data == first.data and len(cache) == 10
    moved = [dataclasses.replace(msgs[0], queue_offset=msgs[0].queue_offset + 1)]
    assert encode_fitting(cache, moved, 10**9)[0].data != first.data[:len(moved[0].body)]
    assert len(cache) == 11  # another queue position is another message


def test_without_keep_nothing_is_kept():
    cache = encoded_cache()
    encode_fitting(cache, _messages(5), 10**9, keep=False)
    assert len(cache) == 0


def test_a_queue_is_shared_while_two_connections_pull_it_close_together():
    shared = SharedQueues()
    assert not shared.note("t", 0, 1, 100.0)
    assert not shared.note("t", 0, 1, 100.1)  # one connection pulling again
    assert not shared.note("t", 1, 2, 100.2)  # another queue
    assert shared.note("t", 0, 2, 100.3)  # a second connection: shared from now on
    assert shared.note("t", 0, 1, 100.3 + SHARED_S - 0.1)
    assert not shared.note("t", 0, 1, 200.0 + CLOSE_S)  # alone again for long enough


def _counted_reads(monkeypatch) -> list[int]:
    """The records each call of read_records reads, from now on."""
    reads: list[int] = []
    real = reads_module.read_records
    monkeypatch.setattr(reads_module, "read_records",
                        lambda log, places: reads.append(len(places)) or real(log, places))
    return reads


def _filled(tmp_path) -> fmq.Broker:
    broker = fmq.Broker.open(str(tmp_path / "data"))
    broker.send_batch([Message("t", b"%d" % i * 100, queue_id=0) for i in range(30)])
    assert broker.wait_indexed()
    return broker


def _pull(broker, cache, keep: bool, offset: int = 0, n: int = 30, room: int = 1 << 20):
    return pull_now(broker, cache, keep, "t", 0, offset, n, None, room)


def _same(a: tuple, b: tuple) -> bool:
    return a[1:] == b[1:] and a[0].data == b[0].data


def test_a_shared_queues_second_pull_reads_no_record(tmp_path, monkeypatch):
    """Another group's pull of the same entries takes the first one's answer, whole."""
    with _filled(tmp_path) as broker:
        cache = encoded_cache()
        alone = _pull(broker, cache, False)  # a queue one connection pulls: keeps nothing
        assert len(cache) == 0
        first = _pull(broker, cache, True)
        assert len(cache) >= 1 and _same(first, alone)
        reads = _counted_reads(monkeypatch)
        second = _pull(broker, cache, False)  # another group's consumer of the queue
        # (not even a call of read_records with nothing to read)
        assert reads == [] and _same(second, first)
        assert _same(_pull(broker, encoded_cache(), False), first) and reads == [30]


def test_a_kept_answer_serves_only_the_same_entries_and_room(tmp_path, monkeypatch):
    """A kept answer stands for its entries only: a pull that reads more entries, fewer
    (a smaller room) or from elsewhere reads its records and answers as a cold read; an
    answer cut by its room is not kept."""
    monkeypatch.setattr(pull_reads, "KEEPS_ENCODED", False)  # answers kept, nothing else
    with _filled(tmp_path) as broker:
        cache = encoded_cache()
        ten = _pull(broker, cache, True, n=10)
        assert ten[1] == 10 and len(cache) == 1
        reads = _counted_reads(monkeypatch)
        for offset, n, room in ((0, 30, 1 << 20), (0, 10, 700), (3, 10, 1 << 20)):
            got = _pull(broker, cache, False, offset, n, room)
            assert _same(got, _pull(broker, encoded_cache(), False, offset, n, room))
            assert reads[-2:] == [reads[-1]] * 2  # both read their records
        small = encoded_cache()
        assert _pull(broker, small, True, room=700)[1] < 30 and len(small) == 1
        assert _same(_pull(broker, small, False), _pull(broker, encoded_cache(), False))
        assert reads[-2:] == [30, 30]


def test_a_pull_of_the_pure_path_takes_messages_kept_one_by_one(tmp_path, monkeypatch):
    """Where the entries differ from a kept answer's, the pure path's pull still finds each
    message kept by its entry (``KEEPS_ENCODED``) and reads no record; written in C
    (``KEEPS_ENCODED`` false) it keeps and looks up none."""
    for keeps in (True, False):
        monkeypatch.setattr(pull_reads, "KEEPS_ENCODED", keeps)
        with _filled(tmp_path / str(keeps)) as broker:
            cache = encoded_cache()
            first = _pull(broker, cache, True)
            assert len(cache) == (31 if keeps else 1)
            reads = _counted_reads(monkeypatch)
            later = _pull(broker, cache, False, offset=5)
            assert reads == ([] if keeps else [25])
            assert _same(later, _pull(broker, encoded_cache(), False, offset=5))
            assert first[1] == 30 and later[1] == 25
        monkeypatch.undo()


# Text about the fields' limit: 16,383 characters, 65,534 bytes (an optional one).
_texts = st.one_of(st.none(), st.text(max_size=8),
                   st.builds(lambda n, c: c * n,
                             st.sampled_from([16_383, 16_384, 16_385, 21_844, 21_845,
                                              32_767, 32_768, 65_534, 65_535, 65_536]),
                             st.sampled_from(["a", "\u00e9", "\u20ac", "\U0001f600"])))


def _encoded_both_ways(m: StoredMessage) -> None:
    """encode_stored's packing against the schema's codec: the same bytes or error."""
    try:
        out = bytearray()
        STORED_MESSAGE.encode(out, stored_to_wire(m))
        want: bytes | type = bytes(out)
    except (ProtocolError, UnicodeEncodeError) as exc:
        want = type(exc)
    try:
        got: bytes | type = encode_stored(m)
    except (ProtocolError, UnicodeEncodeError) as exc:
        got = type(exc)
    assert got == want


@settings(max_examples=300, deadline=None)
@given(topic=st.one_of(st.text(min_size=1, max_size=20), st.just("t" * 70_000)),
       queue_id=st.one_of(st.integers(0, 1 << 32), st.just(-1), st.booleans()),
       queue_offset=st.integers(-1, 1 << 64), offset=st.integers(0, (1 << 64) + 1),
       body=st.one_of(st.binary(max_size=300), st.builds(bytearray, st.binary(max_size=9))),
       key=_texts, tags=_texts,
       properties=st.one_of(st.just({}), st.dictionaries(st.text(max_size=4),
                                                         st.text(max_size=4), max_size=3)),
       store_time=st.one_of(st.integers(-(1 << 63) - 1, 1 << 63), st.floats(0, 1)))
def test_any_message_packed_straight_is_what_the_schema_encodes(
        topic, queue_id, queue_offset, offset, body, key, tags, properties, store_time):
    # Any value: the packing takes only what it can, the codec the rest.
    _encoded_both_ways(StoredMessage(topic, queue_id, queue_offset, offset, body, key, tags,
                                     properties, store_time))


@settings(max_examples=300, deadline=None)
@example("t", 0, 0, 0, b"", "a" * 65_534, "\u00e9" * 32_768, 0)  # the limit, one byte past it
@example("t", 0, 0, 0, b"", "\u20ac" * 21_845, "a" * 65_535, 0)
@example("t", 0, 0, 0, b"", None, "\U0001f600" * 16_384, -1)  # 4 bytes a character
@given(topic=st.text(min_size=1, max_size=20), queue_id=st.integers(0, (1 << 32) - 1),
       queue_offset=st.integers(0, (1 << 64) - 1), offset=st.integers(0, (1 << 64) - 1),
       body=st.binary(max_size=300), key=_texts, tags=_texts,
       store_time=st.integers(-(1 << 63), (1 << 63) - 1))
def test_a_pulled_message_packed_straight_is_what_the_schema_encodes(
        topic, queue_id, queue_offset, offset, body, key, tags, store_time):
    # What pulls decode (fields within their limits, no properties): the packed path,
    # about the texts' limits.
    _encoded_both_ways(StoredMessage(topic, queue_id, queue_offset, offset, body, key, tags,
                                     {}, store_time))
