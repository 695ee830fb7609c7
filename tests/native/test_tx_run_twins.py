"""A transaction request's records placed in one run, against the record-by-record way.

* The compiled ``encode_tx_run`` (``EncodeInto.tx_run`` in ``fmq.log.record._record_c``)
  against its reference (``fmq.log.record.runs``): the same bytes, the same (offset, size)
  per record, the same stopping point and the same errors (type and message), whatever
  the records, room and bounds, hostile ones included.
* ``Log.append_tx_records_locked`` against ``Log.append_locked`` of the same records: the
  same log bytes across segment rolls.
* ``TxWriter``'s PREPARE and COMMIT with the log's run hooks (the run path) and without
  them (``on_append`` only: record by record): the same log, index items (handed over by
  ``hand_over_locked`` or derived by ``index_items``), open transactions and queues.
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
from fmq.index.derive import index_items
from fmq.log import record as R
from fmq.log.log import Log
from fmq.log.record import QueueEntry, Record, RecordType, runs
from fmq.message import Message
from fmq.tx.manager import TxManager
from fmq.tx.writer import TxWriter
from tests.native.twins import compiled, outcome

REFERENCE = functools.partial(runs.encode_tx_run, R.REFERENCE.encode_into)
HOSTILE = [None, -1, 2**31, 2**63, 2**64, -(2**70), 1.5, "0", True, b"x", "\udcff"]
SEGMENT = 4096
TYPES = st.sampled_from([RecordType.PREPARE, RecordType.PRE_MESSAGE, RecordType.REF_MESSAGE,
                         RecordType.TX_MESSAGE, RecordType.COMMIT, RecordType.ROLLBACK])
TEXT = st.text(max_size=8)


@st.composite
def specs(draw) -> tuple:
    """Mostly good record tuples (``runs.TX_RECORD_FIELDS``); some with a field of the
    wrong type or out of range, or of the wrong length."""
    spec = [draw(TYPES), draw(st.integers(-1, 2**31 - 1)), draw(st.integers(-1, 2**40)),
            draw(st.integers(-1, 2**40)), draw(st.integers(0, 2**32 - 1)),
            draw(st.sampled_from(["", "a", "topic.c"]) | TEXT), draw(st.none() | TEXT),
            draw(st.none() | TEXT),
            draw(st.none() | st.dictionaries(TEXT, TEXT, max_size=2)),
            draw(st.binary(max_size=40) | st.integers(0, 1500).map(lambda n: b"b" * n)
                 | st.builds(bytearray, st.binary(max_size=8)))]
    if draw(st.integers(0, 4)) == 0:
        spec[draw(st.integers(0, 9))] = draw(st.sampled_from(HOSTILE))
    if draw(st.integers(0, 19)) == 0:
        return tuple(spec[:draw(st.integers(0, 9))])
    return tuple(spec)


@pytest.fixture(scope="module")
def fast():
    return compiled("fmq.log.record._record_c").EncodeInto(R.crc32c,
                                                          R.python_codec(R.crc32c).encode_into)


def _call(fn, prefix: bytes, *args) -> tuple:
    buf, out = bytearray(prefix), []
    return outcome(fn, buf, *args, out), bytes(buf), out


@settings(max_examples=300, deadline=None)
@given(records=st.lists(specs(), max_size=6), prefix=st.binary(max_size=20),
       room=st.integers(-10, 4000) | st.sampled_from([2**62, 2**70]),
       offset=st.integers(0, 2**40) | st.sampled_from([-1, 2**62, 2**64]),
       stamp=st.integers(-5, 2**41) | st.sampled_from([2**63, -(2**63) - 1]),
       tx_id=TEXT | st.sampled_from([None, 5, "t" * 70000, "\udcff"]),
       group=TEXT | st.sampled_from([None, b"g", "g" * 70000]),
       bounds=st.tuples(st.integers(-1, 7), st.integers(-1, 7)))
def test_compiled_run_encodes_and_fails_as_the_reference(fast, records, prefix, room, offset,
                                                          stamp, tx_id, group, bounds) -> None:
    args = (room, offset, stamp, tx_id, group, records, *bounds)
    assert _call(fast.tx_run, prefix, *args) == _call(REFERENCE, prefix, *args)


def test_arguments_of_other_types_go_to_the_reference(fast) -> None:
    good = [(RecordType.PREPARE, -1, -1, -1, 1, "", None, None, None, b"")]
    for args in ((100, 0, 1, "t", "g", tuple(good), 0, 1),
                 (100.0, 0, 1, "t", "g", good, 0, 1),
                 (100, 0, 1, "t", "g", good, 0, 5),
                 (100, 0, 1, "t", "g", [list(good[0])], 0, 1)):
        assert _call(fast.tx_run, b"", *args) == _call(REFERENCE, b"", *args), args
    buf, out = memoryview(bytearray(10)), []
    assert outcome(fast.tx_run, buf, 100, 0, 1, "t", "g", good, 0, 1, out) \
        == outcome(REFERENCE, buf, 100, 0, 1, "t", "g", good, 0, 1, out)


def test_an_exported_buffer_fails_alike_and_stays_as_it_was(fast) -> None:
    good = [(RecordType.COMMIT, -1, -1, 5, 0, "", None, None, None, b"")]
    for fn in (fast.tx_run, REFERENCE):
        buf, out = bytearray(b"abc"), []
        view = memoryview(buf)
        got = outcome(fn, buf, 1000, 0, 1, "t", "g", good, 0, 1, out)
        view.release()
        assert got[:2] == ("raised", "BufferError") and buf == b"abc" and out == []


def _log_bytes(log_: Log) -> bytes:
    """Every segment's bytes up to the log's end (flushed), FILLERs and unused tails too."""
    log_.flush()
    return b"".join(log_.read(seg.base, min(seg.end, log_.next_offset) - seg.base)
                    for seg in log_.segments if seg.base < log_.next_offset)


@contextmanager
def log_with_items(runs_hooked: bool, segment: int = SEGMENT) -> Iterator[tuple[Log, list]]:
    """A fresh log of ``segment``-byte segments whose ``on_append`` files each record's
    index items with its end offset (what the dispatcher's hand-off queues);
    ``runs_hooked``: ``on_append_entries`` files what runs hand over the same way."""
    with tempfile.TemporaryDirectory() as directory:
        log_ = Log(directory, segment)
        log_.start_at(0)
        items: list = []
        log_.on_append = lambda rec: items.extend(
            (rec.end_offset, item) for item in index_items(rec))
        if runs_hooked:
            log_.on_append_entries = items.extend
        try:
            yield log_, items
        finally:
            log_.close()


GOOD_RECORDS = st.lists(st.tuples(
    st.sampled_from([RecordType.PRE_MESSAGE, RecordType.REF_MESSAGE, RecordType.COMMIT]),
    st.integers(0, 3), st.integers(0, 1500), st.none() | TEXT), max_size=10)


@settings(max_examples=60, deadline=None)
@given(shapes=GOOD_RECORDS)
def test_the_log_places_a_run_as_record_by_record(shapes) -> None:
    records = [(rtype, qid, 7 if rtype == RecordType.REF_MESSAGE else -1, 99, 3, "a", key,
                None, None, b"b" * n if rtype == RecordType.PRE_MESSAGE else b"")
               for rtype, qid, n, key in shapes]
    with log_with_items(True) as (log_, _items):
        placed: list = []
        with log_.lock:
            log_.append_tx_records_locked("tx", "g", 777, records, placed)
        by_run = _log_bytes(log_)
    with log_with_items(False) as (log_, _items):
        one_by_one = []
        with log_.lock:
            for spec in records:
                rec = Record(spec[0], store_time=777, queue_id=spec[1], queue_offset=spec[2],
                             ref_offset=spec[3], ref_size=spec[4], topic=spec[5],
                             tx_id="tx", producer_group="g", key=spec[6], tags=spec[7],
                             properties=spec[8], body=spec[9])
                log_.append_locked(rec)
                one_by_one.append((rec.log_offset, rec.size))
        assert by_run == _log_bytes(log_)
    assert placed == one_by_one


# ---------------------------------------------------------------- the writer, both ways

MESSAGES = st.builds(Message, st.sampled_from(["a", "b"]),
                     st.integers(0, 1200).map(lambda n: b"m" * n),
                     key=st.none() | st.sampled_from(["", "k1", "k2"]),
                     tags=st.none() | st.sampled_from(["", "t"]),
                     properties=st.none() | st.dictionaries(st.text("pq", max_size=3), TEXT,
                                                            max_size=2))


def _items_without_stamps(items: list) -> list:
    return [(end, item._replace(store_time=0) if type(item) is QueueEntry else item)
            for end, item in items]


def _records_without_stamps(data: bytes) -> list:
    out, pos = [], 0
    while pos < len(data):
        rec = R.decode(data, pos)
        if rec.type == RecordType.FILLER:  # the rest of the segment is unused
            out.append(rec.log_offset)
            pos = (pos // SEGMENT + 1) * SEGMENT
            continue
        rec.store_time = 0
        out.append(R.encode(rec))
        pos += rec.size
    return out


def _transactions(requests: list[list[Message]], commits: list[bool], runs_hooked: bool,
                  writer_class: type = TxWriter) -> tuple:
    """Prepare each request's messages as a transaction, then commit those ``commits``
    picks, in order; everything the two ways must agree on (the clock's stamps left out).
    ``writer_class``: the pure writer, or its compiled twin."""
    config = BrokerConfig(segment_size=SEGMENT, max_message_size=1500)
    with log_with_items(runs_hooked) as (log_, items):
        queues = seat.Queues(3, {("a", 1): 40})
        txm = TxManager(max_open=100, finished_memory=100, check_after_ms=60_000,
                        check_max_interval_ms=60_000)
        writer = writer_class(log_, txm, config, queues, SEGMENT, admit=lambda: None)
        assert log_.takes_message_runs() is runs_hooked
        ends, opened = [], []
        for i, messages in enumerate(requests):
            tx, end = writer.place_prepare(messages, "g", f"tx-{i}")
            log_.flush()  # a commit may copy a PRE_MESSAGE: it reads it from the file
            writer.prepare_done(tx)
            ends.append(end)
            opened.append(tx)
        for tx, commit in zip(opened, commits, strict=False):
            if commit:
                placed, end = writer.place_commit("g", tx.tx_id)
                writer.commit_done(placed)
                ends.append(end)
        data = _log_bytes(log_)
    return (ends, _records_without_stamps(data), _items_without_stamps(items),
            [(t.tx_id, t.prepare_offset, t.expected_messages, t.prepared,
              [(m.offset, m.size, m.topic, m.queue_id, m.key, m.tags, m.body_size,
                m.queue_offset) for m in t.messages]) for t in opened],
            sorted(txm.open), dict(txm.finished), queues.messages_in, queues.bytes_in,
            {q: queues.next_offset(*q) for q in [(t, i) for t in "ab" for i in range(3)]})


@settings(max_examples=60, deadline=None)
@given(requests=st.lists(st.lists(MESSAGES, min_size=1, max_size=4), min_size=1, max_size=6),
       commits=st.lists(st.booleans(), max_size=6))
def test_the_writer_places_transactions_in_runs_as_record_by_record(requests, commits):
    assert _transactions(requests, commits, True) == _transactions(requests, commits, False)


def test_a_usual_commit_takes_the_run() -> None:
    """The usual transaction (one message over ``tx_copy_threshold``, in the active
    segment) is committed by the run: its REF's queue entry and the COMMIT's end are
    handed over together, not derived record by record."""
    config = BrokerConfig(segment_size=SEGMENT, max_message_size=1500)
    with log_with_items(True) as (log_, items):
        handed: list = []
        log_.on_append_entries = handed.append
        writer = TxWriter(log_, TxManager(10, 10, 60_000, 60_000), config,
                          seat.Queues(3, {}), SEGMENT, admit=lambda: None)
        tx, _end = writer.place_prepare([Message("a", b"x" * 400)], "g", "tx-1")
        writer.prepare_done(tx)
        placed, _end = writer.place_commit("g", "tx-1")
        writer.commit_done(placed)
        assert items == [] and len(handed) == 1
        [(_ref_end, entry), (_commit_end, end)] = handed[0]
        assert type(entry) is QueueEntry and entry.data_offset == tx.messages[0].offset
        assert (end.tx_id, end.producer_group, end.committed) == ("tx-1", "g", True)


# ---------------------------------------------------------------- a turn's runs

RUNS = st.lists(st.tuples(st.sampled_from(["tx-1", "tx-22", "t"]), st.sampled_from(["g", "gg"]),
                          GOOD_RECORDS), max_size=6)


def _spec_records(shapes: list) -> list[tuple]:
    return [(rtype, qid, 7 if rtype == RecordType.REF_MESSAGE else -1, 99, 3, "a", key,
             None, None, b"b" * n if rtype == RecordType.PRE_MESSAGE else b"")
            for rtype, qid, n, key in shapes]


@settings(max_examples=80, deadline=None)
@given(runs=RUNS, before=st.integers(0, 3900))
def test_the_log_places_a_turns_runs_as_one_run_after_the_other(runs, before) -> None:
    """``append_tx_runs_locked`` (the buffer and room taken once for the turn) against one
    ``append_tx_records_locked`` per transaction: the same bytes and (offset, size) items,
    whether the turn fits in the active segment or rolls part way (``before``: bytes the
    segment holds already)."""
    runs = [(tx_id, group, _spec_records(shapes)) for tx_id, group, shapes in runs]
    filler = [(RecordType.PRE_MESSAGE, 0, -1, -1, 0, "a", None, None, None, b"f" * before)]
    outs = []
    for together in (True, False):
        with log_with_items(True) as (log_, _items):
            placed: list = []
            with log_.lock:
                log_.append_tx_records_locked("x", "g", 1, filler, [])
                if together:
                    log_.append_tx_runs_locked(777, runs, placed)
                else:
                    for tx_id, group, records in runs:
                        log_.append_tx_records_locked(tx_id, group, 777, records, placed)
            outs.append((placed, _log_bytes(log_), log_.next_offset))
    assert outs[0] == outs[1]


#: Messages that pass ``check_message`` (what a turn's PREPAREs hold: the plain decode
#: checked them), some over ``tx_copy_threshold`` and some under it.
PLAIN_MESSAGES = st.builds(Message, st.sampled_from(["a", "b"]),
                           st.integers(0, 1200).map(lambda n: b"m" * n),
                           key=st.none() | st.sampled_from(["k1", "k2"]),
                           tags=st.none() | st.sampled_from(["t"]),
                           properties=st.none() | st.dictionaries(
                               st.text("pq", min_size=1, max_size=3), st.text("xy", max_size=3),
                               max_size=2))


def _outcome(value: object) -> object:
    if isinstance(value, Exception):
        return type(value).__name__, str(value)
    if isinstance(value, tuple):
        tx, end = value
        return tx.tx_id, tx.prepare_offset, end
    return value


def _turns(requests: list[tuple[list[Message], str]], commits: list[str], in_turns: bool,
           segment: int, writer_class: type = TxWriter) -> tuple:
    """The PREPAREs ``requests`` (messages, id) and then the COMMITs ``commits`` (ids),
    placed as one turn each (``place_prepares``, ``place_commits``) or one request at a
    time (``place_prepare``, ``place_commit``), finished once all are placed (as the
    pipeline's acknowledger does): every outcome and what the log, the index items, the
    manager and the queues hold (the clock's stamps left out). ``writer_class``: the pure
    writer, or its compiled twin."""
    config = BrokerConfig(segment_size=segment, max_message_size=1500, tx_copy_threshold=300)
    with log_with_items(True, segment) as (log_, items):
        queues = seat.Queues(3, {("a", 1): 40})
        txm = TxManager(max_open=5, finished_memory=100, check_after_ms=60_000,
                        check_max_interval_ms=60_000)
        writer = writer_class(log_, txm, config, queues, segment, admit=lambda: None)
        if in_turns:
            prepared = writer.place_prepares([(m, "g", i) for m, i in requests])
        else:
            prepared = []
            for messages, tx_id in requests:
                try:
                    prepared.append(writer.place_prepare(messages, "g", tx_id))
                except Exception as exc:  # noqa: BLE001 - compared as an outcome
                    prepared.append(exc)
        got = [_outcome(p) for p in prepared]
        log_.flush()  # a commit may copy a PRE_MESSAGE: it reads it from the file
        for p in prepared:
            if isinstance(p, tuple):
                writer.prepare_done(p[0])
        if in_turns:
            committed = writer.place_commits([("g", tx_id) for tx_id in commits])
        else:
            committed = []
            for tx_id in commits:
                try:
                    committed.append(writer.place_commit("g", tx_id))
                except Exception as exc:  # noqa: BLE001 - compared as an outcome
                    committed.append(exc)
        got += [_outcome(c) for c in committed]
        for c in committed:
            if isinstance(c, tuple):
                writer.commit_done(c[0])
        data = _log_bytes(log_)
        return (got, _records_without_stamps(data), _items_without_stamps(items),
                sorted((k, t.prepare_offset, t.prepared, t.state.value,
                        [(m.offset, m.queue_offset) for m in t.messages])
                       for k, t in txm.open.items()),
                dict(txm.finished), queues.messages_in, queues.bytes_in,
                {q: queues.next_offset(*q) for q in [(t, i) for t in "ab"
                                                     for i in range(3)]})


@settings(max_examples=80, deadline=None)
@given(requests=st.lists(st.tuples(st.lists(PLAIN_MESSAGES, min_size=1, max_size=3),
                                   st.sampled_from(["tx-0", "tx-1", "tx-2", "s", "s//1",
                                                    "tx-3", "tx-4", "tx-5"])),
                         min_size=1, max_size=8),
       commits=st.lists(st.sampled_from(["tx-0", "tx-1", "tx-2", "s", "tx-3", "tx-9"]),
                        max_size=8),
       segment=st.sampled_from([4096, 1 << 16]))
def test_a_turns_prepares_and_commits_end_as_one_by_one(requests, commits, segment):
    """A turn's PREPAREs placed together (registered as reserved, one run when the turn
    fits in the active segment, else one request at a time) and its COMMITs (consecutive
    usual ones as one run, copies and the rest one at a time) against the same requests
    one at a time: the same outcomes (ids repeated within the turn, a scope closed by an
    earlier PREPARE of the turn, the open-transaction limit reached part way, commits
    of unknown and repeated ids), log, index items, open and finished transactions and
    queues."""
    assert _turns(requests, commits, True, segment) == _turns(requests, commits, False,
                                                              segment)
