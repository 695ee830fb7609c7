"""The compiled ``position_run`` (``DecodeAt.position_run`` in ``fmq.log.record._record_c``)
against its reference (``fmq.log.record.runs.position_run`` over the codec's ``check``): on
records written one after the other, some damaged, a FILLER among them, in every kind of
buffer a scan hands over, it appends the same positions, or stops earlier (never later,
never others); on an undamaged log in a flat buffer it takes every record the reference
takes. The Spark source reads a segment so (``SegmentReader.positions(batched=True)``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.log import record as R
from fmq.log.record.runs import position_run
from tests.native.test_record_c_twins import _buffer
from tests.native.test_record_run_twins import _SHORT, _log
from tests.native.twins import compiled, outcome

CODEC = R.python_codec(R.crc32c)
HOSTILE = [None, -1, 2**64, 1.5, "0", True]


def _fast():
    return compiled("fmq.log.record._record_c").DecodeAt(R.crc32c, CODEC.decode_at).position_run


@settings(max_examples=300, deadline=None)
@given(recs=st.lists(_SHORT, max_size=8), base=st.integers(0, 2**40),
       damage=st.none() | st.tuples(st.integers(0, 2**16), st.integers(0, 7)),
       filler_at=st.none() | st.integers(0, 8), kind=st.sampled_from(
           ["bytes", "bytearray", "memoryview", "mmap"]),
       end_cut=st.integers(0, 3), max_records=st.integers(0, 10), start_at=st.integers(0, 3))
def test_a_compiled_position_run_is_the_references_or_a_prefix_of_it(
        recs, base, damage, filler_at, kind, end_cut, max_records, start_at) -> None:
    fast = _fast()
    if filler_at is not None:
        recs.insert(min(filler_at, len(recs)), R.Record(R.RecordType.FILLER))
    data = _log(recs, base, damage)
    buf = _buffer(kind, data)
    end = max(0, len(data) - end_cut * 50)
    start = sum(r.size for r in recs[:start_at])  # also from a record after the first
    mine, theirs = [], []
    got = outcome(fast, buf, start, base, R.FORMAT_MAX_RECORD, end, max_records, mine)
    want = outcome(position_run, CODEC.check, buf, start, base, R.FORMAT_MAX_RECORD, end,
                   max_records, theirs)
    assert got[0] == want[0] == "value"
    assert mine == theirs[: len(mine)]
    assert got[1] == (start if not mine else mine[-1] + R.record_length(data, mine[-1]))
    if damage is None:
        assert mine == theirs and got == want


def test_a_position_run_stops_after_a_filler_and_before_end() -> None:
    fast = _fast()
    recs = [R.Record(R.RecordType.MESSAGE, topic="t", body=b"a" * i) for i in range(5)]
    recs.insert(3, R.Record(R.RecordType.FILLER))
    data = _log(recs, 100, None)
    out: list = []
    at = fast(data, 0, 100, 1 << 20, len(data), 100, out)
    assert out == [r.log_offset - 100 for r in recs[:4]]
    assert at == sum(r.size for r in recs[:4])
    second = recs[1].log_offset - 100  # a record starting at end is not checked
    out = []
    assert fast(data, 0, 100, 1 << 20, second, 100, out) == second and out == [0]


def test_a_position_run_names_no_record_whose_offset_passes_2_to_the_64() -> None:
    """The C run adds positions to the base in 64 bits: a base that would pass 2**64 inside
    the run is left to the reference (which finds no record there either)."""
    fast = _fast()
    data = _log([R.Record(R.RecordType.MESSAGE, topic="t", body=b"x")], 0, None)
    out: list = []
    assert fast(data, 0, 2**64 - 1, 1 << 20, len(data), 9, out) == 0 and out == []


def test_hostile_arguments_take_nothing() -> None:
    """Whatever the C path does not take it leaves to the scan's own check: nothing is
    appended, the position is returned as given."""
    fast = _fast()
    good = _log([R.Record(R.RecordType.MESSAGE, topic="t", body=b"x")], 0, None)
    for bad in HOSTILE:
        for args in ((bad, 0, 0, 1 << 20, 99, 9), (good, bad, 0, 1 << 20, 99, 9),
                     (good, 0, bad, 1 << 20, 99, 9), (good, 0, 0, bad, 99, 9),
                     (good, 0, 0, 1 << 20, bad, 9), (good, 0, 0, 1 << 20, 99, bad)):
            out: list = []
            assert fast(*args, out) is args[1] and out == [], args
    out = []
    assert fast(_buffer("wide view", good), 0, 0, 1 << 20, 99, 9, out) == 0 and out == []


def test_a_batched_position_scan_is_the_same_scan_in_lists(tmp_path) -> None:
    """What the Spark source reads: lists of positions which, laid end to end, are the
    positions of the scan one by one, in every segment; damage comes alone."""
    from fmq import Broker, BrokerConfig, Message
    from fmq.log.reader import Damage, OnCorruption
    from fmq.log.scanner import LogSegments, SegmentScan

    path = str(tmp_path / "d")
    with Broker.open(path, BrokerConfig(segment_size=16 * 1024, max_message_size=4096)) as b:
        for i in range(80):
            b.send_batch([Message("t", b"m" * 200, key=f"k{i}") for _ in range(3)])
            if i % 7 == 0:
                tx = b.transactions.prepare([Message("t", b"tx")], "shop")
                b.transactions.commit(tx, "shop")
    from fmq.log.reader import DirectorySource

    source = DirectorySource(str(tmp_path / "d" / "log"))
    log = LogSegments(source, 16 * 1024, source.bases())
    assert len(log.bases) > 2
    compiled_runs = 0
    for index in range(len(log.bases)):
        def scan(batched: bool, index=index) -> SegmentScan:
            return SegmentScan(log, index, on_corruption=OnCorruption.SKIP, positions=True,
                               batched=batched)
        one_by_one = list(scan(False))
        runs = list(scan(True))
        assert all(type(run) is list and run for run in runs)
        assert [i for run in runs for i in run] == one_by_one
        compiled_runs += max(len(run) for run in runs) > 1
        assert not any(isinstance(i, Damage) for i in one_by_one)
        whole, batched = scan(False), scan(True)
        list(whole), list(batched)
        assert (batched.sealed, batched.end_offset) == (whole.sealed, whole.end_offset)
    # Compiled, a segment comes in runs of many records; pure, one record per list.
    assert compiled_runs == (0 if R.position_run is None else len(log.bases))


def test_a_batched_position_scan_yields_damage_as_a_list_of_one(tmp_path) -> None:
    """Damage the walk finds and the segment verdicts alike (a missing segment before, a
    segment cut short with valid records after it) come as ``[damage]`` in a batched
    scan, where they are in the scan one by one."""
    from fmq import Broker, BrokerConfig, Message
    from fmq.log.reader import Damage, DirectorySource, OnCorruption
    from fmq.log.scanner import LogSegments, SegmentScan

    path = str(tmp_path / "d")
    with Broker.open(path, BrokerConfig(segment_size=16 * 1024, max_message_size=4096)) as b:
        for i in range(60):
            b.send_batch([Message("t", b"m" * 200, key=f"k{i}") for _ in range(3)])
    source = DirectorySource(str(tmp_path / "d" / "log"))
    log = LogSegments(source, 16 * 1024, source.bases())
    first = log.read(0)
    with open(str(tmp_path / "d" / "log" / f"{log.bases[0]:020d}.seg"), "r+b") as f:
        f.seek(len(first) // 2)  # a flipped byte mid segment, and its filler cut away
        f.write(bytes([first[len(first) // 2] ^ 0xFF]))
        f.truncate(len(first) - 72)
    log = LogSegments(source, 16 * 1024, source.bases())
    for index, previous_end in ((0, None), (1, log.bases[1] - 1)):
        def scan(batched: bool, index=index, previous_end=previous_end) -> list:
            return list(SegmentScan(log, index, on_corruption=OnCorruption.SKIP,
                                    positions=True, batched=batched,
                                    previous_end=previous_end))
        one_by_one, runs = scan(False), scan(True)
        assert all(type(run) is list and run for run in runs)
        assert [i for run in runs for i in run] == one_by_one
        damages = [run for run in runs if isinstance(run[0], Damage)]
        assert damages and all(len(run) == 1 for run in damages)
