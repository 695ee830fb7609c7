"""The compiled ``decode_run`` (``DecodeAt.run`` in ``fmq.log.record._record_c``) against its
reference (``fmq.log.record.runs.decode_run`` over the codec's ``decode_at``): on a buffer of
records written one after the other, some damaged, a FILLER among them, in every kind of
buffer a scan hands over, it appends the same records slot by slot, or stops earlier (never
later, never others), and its returned position is where its last record ends; on an
undamaged log in a flat buffer it takes every record the reference takes. Scans decode the
position a run stopped at themselves, so an early stop costs time, never a record. The same
for ``entry_run`` (reference ``decode_entry_run``), recovery's redo: a plain message comes
as the queue entry ``fmq.index.derive.queue_entry`` makes of its record."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.index.derive import queue_entry
from fmq.log import record as R
from fmq.log.record import QueueEntry
from fmq.log.record.runs import decode_entry_run, decode_run
from tests.log.test_twins import records
from tests.native.test_record_c_twins import _buffer
from tests.native.twins import compiled, outcome

CODEC = R.python_codec(R.crc32c)
HOSTILE = [None, -1, 2**64, 1.5, "0", True]


@pytest.fixture(scope="module")
def fast():
    return compiled("fmq.log.record._record_c").DecodeAt(R.crc32c, CODEC.decode_at).run


@pytest.fixture(scope="module")
def fast_entries():
    return compiled("fmq.log.record._record_c").DecodeAt(R.crc32c, CODEC.decode_at).entry_run


def _slots(recs: list) -> list:
    return [tuple(r) if type(r) is QueueEntry else
            tuple(bytes(v) if isinstance(v, memoryview) else v
                  for v in (getattr(r, n) for n in R.Record.__slots__)) for r in recs]


def _log(recs: list[R.Record], base: int, damage: tuple | None) -> bytes:
    buf = bytearray()
    for rec in recs:
        rec.log_offset = base + len(buf)
        buf += CODEC.encode(rec)
    if damage is not None and buf:
        where, bit = damage
        buf[where % len(buf)] ^= 1 << bit
    return bytes(buf)


_SHORT = records().filter(lambda r: max(len(r.tx_id), len(r.producer_group), len(r.topic))
                          <= 65535)


@settings(max_examples=200, deadline=None)
@given(recs=st.lists(_SHORT, max_size=8), base=st.integers(0, 2**40),
       damage=st.none() | st.tuples(st.integers(0, 2**16), st.integers(0, 7)),
       filler_at=st.none() | st.integers(0, 8), kind=st.sampled_from(
           ["bytes", "bytearray", "memoryview", "mmap"]),
       copy_body=st.booleans(), end_cut=st.integers(0, 3), max_records=st.integers(0, 10))
def test_a_compiled_run_is_the_references_or_a_prefix_of_it(
        fast, recs, base, damage, filler_at, kind, copy_body, end_cut, max_records) -> None:
    if filler_at is not None:
        recs.insert(min(filler_at, len(recs)), R.Record(R.RecordType.FILLER))
    data = _log(recs, base, damage)
    buf = _buffer(kind, data)
    end = max(0, len(data) - end_cut * 50)
    mine, theirs = [], []
    got = outcome(fast, buf, 0, base, R.FORMAT_MAX_RECORD, copy_body, end, max_records, mine)
    want = outcome(decode_run, CODEC.decode_at, buf, 0, base, R.FORMAT_MAX_RECORD, copy_body,
                   end, max_records, theirs)
    assert got[0] == want[0] == "value"
    assert _slots(mine) == _slots(theirs[: len(mine)])
    assert got[1] == sum(r.size for r in mine)
    if damage is None:
        assert _slots(mine) == _slots(theirs) and got == want


def test_a_run_stops_at_a_filler_and_before_end(fast) -> None:
    recs = [R.Record(R.RecordType.MESSAGE, topic="t", body=b"a" * i) for i in range(5)]
    recs.insert(3, R.Record(R.RecordType.FILLER))
    data = _log(recs, 100, None)
    out: list = []
    at = fast(data, 0, 100, 1 << 20, True, len(data), 100, out)
    assert [r.type for r in out] == [R.RecordType.MESSAGE] * 3 + [R.RecordType.FILLER]
    assert at == sum(r.size for r in out)
    second = recs[1].log_offset - 100  # a record starting at end is not read
    out = []
    assert fast(data, 0, 100, 1 << 20, True, second, 100, out) == second
    assert len(out) == 1


def test_hostile_arguments_take_nothing(fast) -> None:
    """Whatever the C path does not take it leaves to the scan's own decode_at: nothing is
    appended, the position is returned as given."""
    good = _log([R.Record(R.RecordType.MESSAGE, topic="t", body=b"x")], 0, None)
    for bad in HOSTILE:
        for args in ((bad, 0, 0, 1 << 20, True, 99, 9), (good, bad, 0, 1 << 20, True, 99, 9),
                     (good, 0, bad, 1 << 20, True, 99, 9), (good, 0, 0, bad, True, 99, 9),
                     (good, 0, 0, 1 << 20, True, bad, 9), (good, 0, 0, 1 << 20, True, 99, bad)):
            out: list = []
            assert fast(*args, out) is args[1] and out == [], args
    out = []
    wide = memoryview(good[: len(good) - len(good) % 4]).cast("I")
    assert fast(wide, 0, 0, 1 << 20, True, 99, 9, out) == 0 and out == []


_PLAIN = st.builds(lambda topic, key, body, q, qo, t: R.Record(
    R.RecordType.MESSAGE, topic=topic, key=key, body=body, queue_id=q, queue_offset=qo,
    store_time=t), st.text(max_size=12), st.none() | st.text(max_size=12),
    st.binary(max_size=64), st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1))


@settings(max_examples=200, deadline=None)
@given(recs=st.lists(_PLAIN | _SHORT, max_size=10), base=st.integers(0, 2**40),
       damage=st.none() | st.tuples(st.integers(0, 2**16), st.integers(0, 7)),
       filler_at=st.none() | st.integers(0, 10), kind=st.sampled_from(
           ["bytes", "bytearray", "memoryview", "mmap"]),
       copy_body=st.booleans(), max_records=st.integers(0, 12))
def test_an_entry_run_is_the_references_or_a_prefix_of_it(
        fast_entries, recs, base, damage, filler_at, kind, copy_body, max_records) -> None:
    """Plain messages come as their queue entries (what ``queue_entry`` makes of the
    record), every other record as the Record the reference decodes."""
    if filler_at is not None:
        recs.insert(min(filler_at, len(recs)), R.Record(R.RecordType.FILLER))
    data = _log(recs, base, damage)
    buf = _buffer(kind, data)
    mine, theirs = [], []
    got = outcome(fast_entries, buf, 0, base, R.FORMAT_MAX_RECORD, copy_body, len(data),
                  max_records, mine)
    want = outcome(decode_entry_run, CODEC.decode_at, buf, 0, base, R.FORMAT_MAX_RECORD,
                   copy_body, len(data), max_records, theirs)
    assert got[0] == want[0] == "value"
    assert _slots(mine) == _slots(theirs[: len(mine)])
    assert got[1] == sum(r.data_size if type(r) is QueueEntry else r.size for r in mine)
    assert len({type(r) is QueueEntry for r in mine}) <= 1  # entries only, or records only
    if damage is None:
        assert _slots(mine) == _slots(theirs) and got == want


def test_an_entry_is_the_records_queue_entry(fast_entries) -> None:
    rec = R.Record(R.RecordType.MESSAGE, topic="orders", key="k1", body=b"x" * 10,
                   queue_id=3, queue_offset=77, store_time=123)
    timer = R.Record(R.RecordType.MESSAGE, topic="orders", body=b"y", ref_offset=5)
    tagged = R.Record(R.RecordType.MESSAGE, topic="orders", tags="a", body=b"z")
    data = _log([rec, timer, tagged], 1000, None)
    out: list = []
    first = fast_entries(data, 0, 1000, 1 << 20, False, len(data), 9, out)
    decoded = CODEC.decode_at(data, 0, 1000, 1 << 20, True)
    assert out == [queue_entry(decoded)] and type(out[0]) is QueueEntry
    assert first == decoded.size  # a run holds entries only, or records only
    out = []
    assert fast_entries(data, first, 1000, 1 << 20, False, len(data), 9, out) == len(data)
    assert [type(r) for r in out] == [R.Record, R.Record]  # a timer's, a tagged one


def test_redo_reads_plain_messages_as_entries_on_the_compiled_path(tmp_path) -> None:
    """Recovery gets entries, not Records, for plain messages, and indexes them alike."""
    from fmq import Broker, Message
    from fmq.log.scanner import LogScanner

    compiled("fmq.log.record._record_c")
    path = str(tmp_path / "d")
    with Broker.open(path) as b:
        b.send_batch([Message("t", b"m%d" % i, key=f"k{i}") for i in range(50)])
        b.send(Message("t", b"tagged", tags="x"))
    items = list(LogScanner(str(tmp_path / "d" / "log"), copy_body=False,
                            queue_entries=True))
    if R.NO_EXTENSIONS:
        assert not any(type(i) is QueueEntry for i in items)
    else:
        assert sum(type(i) is QueueEntry for i in items) == 50


def test_a_batched_scan_is_the_same_scan_in_lists(tmp_path) -> None:
    """What recovery reads: lists that hold entries only or records only, which laid end to
    end are the items of the scan one by one, across segments; damage still raises."""
    from fmq import Broker, BrokerConfig, Message
    from fmq.log.scanner import LogScanner

    path = str(tmp_path / "d")
    with Broker.open(path, BrokerConfig(segment_size=16 * 1024, max_message_size=4096)) as b:
        for i in range(30):
            b.send_batch([Message("t", b"m" * 200, key=f"k{i}") for _ in range(3)])
            b.send(Message("t", b"tagged", tags="x"))
            if i % 7 == 0:
                tx = b.transactions.prepare([Message("t", b"tx")], "shop")
                b.transactions.commit(tx, "shop")
    log_dir = str(tmp_path / "d" / "log")
    one_by_one = list(LogScanner(log_dir, copy_body=False, queue_entries=True))
    runs = list(LogScanner(log_dir, copy_body=False, queue_entries=True, batched=True))
    assert all(runs) and all(len({type(i) is QueueEntry for i in run}) == 1 for run in runs)
    assert _slots([i for run in runs for i in run]) == _slots(one_by_one)
    with pytest.raises(ValueError):
        LogScanner(log_dir, on_corruption="skip", batched=True)
