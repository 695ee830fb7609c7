"""Every fast twin of the record format against its reference, byte for byte, on hostile
input too; and the one seat choosing them (``FMQ_NO_EXTENSIONS=1``: every reference)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.log import record as R
from fmq.log.record import HEADER_SIZE, TWINS, Record, RecordType

T = RecordType
MARKS = (T.PREPARE, T.COMMIT, T.ROLLBACK)
TEXT = st.text(max_size=30)
I64 = st.integers(-(2**63), 2**63 - 1)


def _outcome(fn: Callable, *args) -> tuple:
    """What a call did: its value, or the type and message of what it raised."""
    try:
        return ("value", fn(*args))
    except Exception as exc:  # noqa: BLE001 - the twins must fail alike, whatever it is
        return ("raised", type(exc), str(exc))


@st.composite
def records(draw) -> Record:
    """Records of every type, mostly marks; some with fields a mark never has, some with a
    field over the format's 65535-byte limit."""
    kind = draw(st.sampled_from(MARKS + tuple(T)))
    rec = Record(kind, log_offset=draw(st.integers(0, 2**63 - 1)), store_time=draw(I64),
                 queue_id=draw(st.integers(-(2**31), 2**31 - 1)), queue_offset=draw(I64),
                 ref_offset=draw(I64), ref_size=draw(st.integers(0, 2**32 - 1)),
                 tx_id=draw(TEXT), producer_group=draw(TEXT))
    if draw(st.booleans()):
        rec.topic = draw(TEXT)
        rec.key = draw(st.none() | TEXT)
        rec.tags = draw(st.none() | TEXT)
        rec.properties = draw(st.none() | st.dictionaries(TEXT, TEXT, max_size=3))
        rec.body = draw(st.binary(max_size=200))
    oversized = draw(st.sampled_from([None, None, None, "tx_id", "producer_group", "topic"]))
    if oversized:
        setattr(rec, oversized, "x" * 65536)
    return rec


def _copy(rec: Record) -> Record:
    out = Record(rec.type)
    for name in Record.__slots__:
        setattr(out, name, getattr(rec, name))
    return out


def _encoder_case(draw) -> Callable:
    rec = draw(records())
    prefix = draw(st.binary(max_size=40))
    # Appending at the end of the buffer, or into its middle (a rewrite in place).
    at = draw(st.sampled_from([len(prefix), len(prefix) // 2, 0]))

    def run(encode: Callable) -> tuple:
        buf, mine = bytearray(prefix), _copy(rec)
        result = _outcome(encode, buf, at, mine)
        return result, bytes(buf), mine.size

    return run


def _crc_case(draw) -> Callable:
    data = draw(st.binary(max_size=4096))
    cut = draw(st.integers(0, len(data)))
    view = draw(st.booleans())
    arg = memoryview(data)[cut:] if view else data[cut:]
    return lambda crc: _outcome(crc, arg)


def _damaged_record(draw) -> tuple:
    """A valid record (at its own offset) damaged at random: bytes flipped, cut short, the
    length or a field length overwritten, or bytes that were never a record; with the
    record, a size limit to check against."""
    rec = draw(records().filter(lambda r: max(len(r.tx_id), len(r.producer_group),
                                              len(r.topic)) <= 65535))
    rec.log_offset = draw(st.integers(0, 2**40))
    data = bytearray(R.REFERENCE.encode(rec))
    damage = draw(st.sampled_from(["none", "flip", "cut", "length", "field", "random"]))
    if damage == "flip":
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    elif damage == "cut":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif damage == "length":
        data[0:4] = draw(st.integers(0, 2**32 - 1)).to_bytes(4, "little")
    elif damage == "field":
        pos = draw(st.sampled_from([52, 54, 56, 58, 60, 64, 68]))
        data[pos : pos + 2] = draw(st.integers(0, 2**16 - 1)).to_bytes(2, "little")
    elif damage == "random":
        data = bytearray(draw(st.binary(max_size=300)))
    limit = draw(st.sampled_from([R.FORMAT_MAX_RECORD, 1 << 16, HEADER_SIZE + 10]))
    return rec, bytes(data), limit


def _decode_case(draw) -> Callable:
    rec, data, limit = _damaged_record(draw)
    copy_body = draw(st.booleans())

    def run(decode_at: Callable) -> tuple:
        got = _outcome(decode_at, data, 0, rec.log_offset, limit, copy_body)
        if got[0] == "value":
            back = got[1]
            return ("value", tuple(bytes(v) if isinstance(v, memoryview) else v
                                   for v in (getattr(back, n) for n in Record.__slots__)))
        return got

    return run


def _check_case(draw) -> Callable:
    rec, data, limit = _damaged_record(draw)
    prefix = draw(st.binary(max_size=8))
    buf = prefix + data

    def run(check: Callable) -> tuple:
        return _outcome(lambda: check(buf, len(prefix), base_offset=rec.log_offset - len(prefix),
                                      max_record_size=limit))

    return run


#: How each twin is exercised: per name in ``TWINS``, a maker drawing one input and
#: returning what running an implementation on it gives.
CASES: dict[str, Callable] = {
    "crc32c": _crc_case,
    "encode_into": _encoder_case,
    "encode_mark_into": _encoder_case,
    "decode_at": _decode_case,
    "check": _check_case,
}


def test_every_twin_has_a_case():
    assert set(CASES) == set(TWINS)


@pytest.mark.parametrize("name", sorted(TWINS))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fast_twin_equals_its_reference(name, data):
    reference, fast = TWINS[name]
    run = CASES[name](data.draw)
    assert run(fast) == run(reference)


def test_this_machine_runs_the_fast_twins():
    # Without them the twin test above would compare the reference with itself, which is
    # what the pure pass (FMQ_NO_EXTENSIONS=1, .ci/run) asks for; there the fast twins are
    # tests/native's to compare, and every chosen one must be the reference.
    if R.NO_EXTENSIONS:
        assert all(fast is reference for reference, fast in TWINS.values())
        return
    assert R.CRC_IMPLEMENTATION == "crc32c"
    for name, (reference, fast) in TWINS.items():
        assert fast is not reference, name


def test_fmq_no_extensions_runs_every_reference_twin(tmp_path):
    script = (
        "import fmq\n"
        "from fmq.log import record as R\n"
        "assert R.NO_EXTENSIONS and R.CRC_IMPLEMENTATION == 'crcmod', R.CRC_IMPLEMENTATION\n"
        "assert all(f is r for r, f in R.TWINS.values()), 'a fast twin still runs'\n"
        "assert R.crc32c is R.reference_crc32c\n"
        f"with fmq.Broker.open({str(tmp_path)!r}) as b:\n"
        "    r = b.send(fmq.Message('t', b'x', key='k'))\n"
        "    txs = b.transactions\n"
        "    txs.commit(txs.prepare([fmq.Message('t', b'y')], 'g'))\n"
        "    assert b.wait_indexed()\n"
        "    print(len(b.reads.pull('t', r.queue_id, 0)))\n"
    )
    env = dict(os.environ, FMQ_NO_EXTENSIONS="1")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # The log the reference twins wrote reads back with the fast ones, record by record.
    import fmq

    with fmq.Broker.open(str(tmp_path)) as b:
        assert b.wait_indexed()
        bodies = sorted(m.body for v in b.reads.all_messages(["t"]).values() for m in v)
    assert bodies == [b"x", b"y"]
