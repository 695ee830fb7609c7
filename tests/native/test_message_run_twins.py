"""The batch placement of plain sends, against the record-by-record one it replaces.

* The compiled ``encode_message_run`` (``EncodeInto.message_run`` in
  ``fmq.log.record._record_c``) against its reference (``fmq.log.record.runs``): the same
  bytes, the same queue entries, the same stopping point and the same errors (type and
  message), whatever the messages, queue positions, room and bounds, hostile ones included.
* ``Log.append_messages_locked`` (whichever ``encode_message_run`` runs) against
  ``Log.append_locked`` of the records ``append_message_locked`` builds: the same log
  bytes across segment rolls, and for each record the queue entry ``index_items`` derives
  from it, at the same end offset.
* ``place_messages`` with the log's batch hook (the dispatcher's ``on_append_entries``)
  and without it (``on_append`` only: record by record): the same log, results, queue
  state and index items.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.config import BrokerConfig
from fmq.engine import queues as seat
from fmq.engine.broker import Broker
from fmq.index.derive import index_items
from fmq.log import record as R
from fmq.log.log import Log
from fmq.log.placement import reserve_segments
from fmq.log.record import QueueEntry, runs
from fmq.message import Message
from tests.native.test_placement_twins import messages
from tests.native.twins import compiled, outcome

REFERENCE = functools.partial(runs.encode_message_run, R.REFERENCE.encode_into,
                              R.reference_crc32c)
HOSTILE = [None, -1, 2**31, 2**63, 2**64, -(2**70), 1.5, "0", True]
SEGMENT = 4096
# Bodies up to 1.5 KiB in 4 KiB segments: most batches roll, some more than once.
GOOD = st.builds(Message, st.sampled_from(["a", "b", "topic.c"]),
                 st.binary(max_size=20) | st.integers(0, 1500).map(lambda n: b"b" * n),
                 key=st.none() | st.text(max_size=8), tags=st.none() | st.text(max_size=8),
                 properties=st.none() | st.dictionaries(st.text(max_size=4),
                                                        st.text(max_size=4), max_size=2))


@pytest.fixture(scope="module")
def fast():
    return compiled("fmq.log.record._record_c").EncodeInto(R.crc32c,
                                                          R.python_codec(R.crc32c).encode_into)


def _call(fn, prefix: bytes, *args) -> tuple:
    buf, out = bytearray(prefix), []
    got = outcome(fn, buf, *args, out)
    # Entries compare as tuples: their type is checked on its own.
    assert all(type(entry) is QueueEntry for _end, entry in out)
    return got, bytes(buf), out


@settings(max_examples=300, deadline=None)
@given(batch=st.lists(messages(), max_size=6), prefix=st.binary(max_size=20),
       room=st.integers(-10, 4000) | st.sampled_from([2**62, 2**70]),
       offset=st.integers(0, 2**40) | st.sampled_from([-1, 2**62, 2**64]),
       stamp=st.integers(-5, 2**41) | st.sampled_from([2**63, -(2**63) - 1]),
       positions=st.lists(st.tuples(st.integers(-3, 2**31 - 1) | st.sampled_from(HOSTILE),
                                    st.integers(-3, 2**40) | st.sampled_from(HOSTILE)),
                          min_size=6, max_size=6),
       bounds=st.tuples(st.integers(-1, 7), st.integers(-1, 7)))
def test_compiled_run_encodes_and_fails_as_the_reference(fast, batch, prefix, room, offset,
                                                          stamp, positions, bounds) -> None:
    qids = [p[0] for p in positions]
    qoffs = [p[1] for p in positions]
    args = (room, offset, stamp, batch, qids, qoffs, *bounds)
    assert _call(fast.message_run, prefix, *args) == _call(REFERENCE, prefix, *args)


def test_arguments_of_other_types_go_to_the_reference(fast) -> None:
    good = [Message("a", b"x", key="k")]
    for args in ((100, 0, 1, tuple(good), [0], [0], 0, 1),
                 (100, 0, 1, good, (0,), [0], 0, 1),
                 (100.0, 0, 1, good, [0], [0], 0, 1),
                 (100, 0, 1, good, [0], [0], 0, 5),
                 (100, 0, 1, [memoryview(b"x")], [0], [0], 0, 1)):
        assert _call(fast.message_run, b"", *args) == _call(REFERENCE, b"", *args), args
    buf, out = memoryview(bytearray(10)), []
    assert outcome(fast.message_run, buf, 100, 0, 1, good, [0], [0], 0, 1, out) \
        == outcome(REFERENCE, buf, 100, 0, 1, good, [0], [0], 0, 1, out)


def test_an_exported_buffer_fails_alike_and_stays_as_it_was(fast) -> None:
    for fn in (fast.message_run, REFERENCE):
        buf, out = bytearray(b"abc"), []
        view = memoryview(buf)
        got = outcome(fn, buf, 1000, 0, 1, [Message("a", b"body")], [0], [0], 0, 1, out)
        view.release()
        assert got[:2] == ("raised", "BufferError") and buf == b"abc" and out == []


def _log_bytes(log_: Log) -> bytes:
    """Every segment's bytes up to the log's end (flushed), FILLERs and unused tails too."""
    log_.flush()
    return b"".join(log_.read(seg.base, min(seg.end, log_.next_offset) - seg.base)
                    for seg in log_.segments if seg.base < log_.next_offset)


@contextmanager
def _log_with_items() -> Iterator[tuple[Log, list]]:
    """A fresh log whose ``on_append`` files each record's index items with its end offset
    (what the dispatcher's hand-off queues)."""
    with tempfile.TemporaryDirectory() as directory:
        log_ = Log(directory, SEGMENT)
        log_.start_at(0)
        items: list = []
        log_.on_append = lambda rec: items.extend(
            (rec.end_offset, item) for item in index_items(rec))
        try:
            yield log_, items
        finally:
            log_.close()


def _placed_by_records(batch: list[Message]) -> tuple[bytes, list]:
    """Each message's record built and appended on its own (the record-by-record path)."""
    with _log_with_items() as (log_, items):
        queues = seat.Queues(4, {})
        with log_.lock:
            reserve_segments(log_, batch)
            for m in batch:
                seat.append_message_locked(log_, queues, m, 777)
        return _log_bytes(log_), items


def _placed_by_run(batch: list[Message]) -> tuple[bytes, list]:
    with _log_with_items() as (log_, items):
        handed: list = []
        log_.on_append_entries = handed.extend
        queues = seat.Queues(4, {})
        with log_.lock:
            reserve_segments(log_, batch)
            qids, qoffs = queues.plan(batch)
            placed: list = []
            log_.append_messages_locked(batch, qids, qoffs, 777, placed)
        assert handed == placed and items == []
        assert all(type(entry) is QueueEntry for _end, entry in placed)
        return _log_bytes(log_), placed


@settings(max_examples=60, deadline=None)
@given(batch=st.lists(GOOD, max_size=12))
def test_the_log_places_a_run_as_record_by_record(batch: list[Message]) -> None:
    assert _placed_by_run(batch) == _placed_by_records(batch)


def _place(batch: list[Message], run: bool) -> tuple:
    with _log_with_items() as (log_, items):
        if run:
            log_.on_append_entries = items.extend
        queues = seat.Queues(3, {("a", 1): 40})
        # A single message is placed record by record either way (place_messages).
        assert log_.takes_message_runs() is run
        results, end = seat.place_messages(log_, queues, batch)
        data = _log_bytes(log_)
    # The store time is the clock's: compare the bytes without it, record by record.
    return ([(r.offset, r.queue_id, r.queue_offset) for r in results], end,
            _without_stamps(data), items_without_stamps(items), queues.messages_in,
            queues.bytes_in, {q: queues.next_offset(*q) for q in
                              [(t, i) for t in ("a", "b", "topic.c") for i in range(3)]})


def _without_stamps(data: bytes) -> list:
    out, pos = [], 0
    while pos < len(data):
        rec = R.decode(data, pos)
        if rec.type == R.RecordType.FILLER:  # the rest of the segment is unused
            out.append(rec.log_offset)
            pos = (pos // SEGMENT + 1) * SEGMENT
            continue
        rec.store_time = 0
        out.append(R.encode(rec))
        pos += rec.size
    return out


def items_without_stamps(items: list) -> list:
    return [(end, item._replace(store_time=0)) for end, item in items]


@settings(max_examples=60, deadline=None)
@given(batch=st.lists(GOOD, max_size=12))
def test_place_messages_gives_the_same_with_and_without_the_batch_hook(batch) -> None:
    assert _place(batch, True) == _place(batch, False)


def test_a_broker_places_sends_in_runs_and_indexes_every_one() -> None:
    batch = [Message("a", str(i).encode(), key=f"k{i % 5}", tags="t" if i % 2 else None)
             for i in range(300)]
    with tempfile.TemporaryDirectory() as directory:
        with Broker.open(directory, BrokerConfig(segment_size=SEGMENT * 4, max_message_size=1024,
                                                 queues_per_topic=3)) as broker:
            assert broker._log.takes_message_runs()
            results = broker.send_batch(batch)
            assert broker.wait_indexed()
            for qid in range(3):
                mine = [(r.queue_offset, m.body) for r, m in zip(results, batch, strict=True)
                        if r.queue_id == qid]
                assert [q for q, _ in mine] == list(range(len(mine)))
                pulled = broker.reads.pull("a", qid, 0, max_messages=len(mine) + 1)
                assert [(p.queue_offset, bytes(p.body)) for p in pulled] == mine
            assert {bytes(m.body) for m in broker.reads.messages_by_key("a", "k3", limit=1000)} == \
                {str(i).encode() for i in range(3, 300, 5)}
