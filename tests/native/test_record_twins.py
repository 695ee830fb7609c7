"""The compiled record codec (``fmq.log.record._codec_c``) against the pure module it is
compiled from (and the mark encoder over each codec), with the same CRC: the same bytes written
(appended or in place), the same records decoded, the same error (type and message) for
damaged, truncated, oversized or random input and for wrong types. The cases are the ones
tests/log/test_twins.py runs on every twin of the record format."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.log import record as R
from fmq.log.record import codec as pure_codec
from fmq.log.record import marks as pure_marks
from tests.log.test_twins import _check_case, _decode_case, _encoder_case
from tests.native.twins import compiled, outcome

CRC = R.crc32c
WRONG = [None, 0, "text", ["x"], 1.5]


@pytest.fixture(scope="module")
def twins() -> dict:
    codec_c = compiled("fmq.log.record._codec_c").python_codec(CRC)
    codec_p = pure_codec.python_codec(CRC)
    marks_c = pure_marks.mark_encoder(CRC, codec_c.encode_into)
    marks_p = pure_marks.mark_encoder(CRC, codec_p.encode_into)
    return {"encode_into": (codec_p.encode_into, codec_c.encode_into),
            "encode_mark_into": (marks_p, marks_c),
            "decode_at": (codec_p.decode_at, codec_c.decode_at),
            "check": (codec_p.check, codec_c.check)}


def _same(fast: tuple, pure: tuple) -> bool:
    """Two outcomes alike, a decoded Record compared slot by slot."""
    def plain(got: tuple) -> tuple:
        if got[0] == "value" and isinstance(got[1], R.Record):
            return ("value", tuple(bytes(v) if isinstance(v, memoryview) else v
                                   for v in (getattr(got[1], n) for n in R.Record.__slots__)))
        return got
    return plain(fast) == plain(pure)


CASES = {"encode_into": _encoder_case, "encode_mark_into": _encoder_case,
         "decode_at": _decode_case, "check": _check_case}


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_compiled_equals_pure(twins, name: str, data) -> None:
    pure, fast = twins[name]
    run = CASES[name](data.draw)
    assert run(fast) == run(pure)


def test_wrong_types_fail_alike(twins) -> None:
    rec = R.Record(R.RecordType.COMMIT, tx_id="t", producer_group="g")
    for name in ("encode_into", "encode_mark_into"):
        pure, fast = twins[name]
        for bad in WRONG:
            assert outcome(fast, bad, 0, rec) == outcome(pure, bad, 0, rec), (name, bad)
            assert outcome(fast, bytearray(), bad, rec) == outcome(pure, bytearray(), bad, rec)
            assert outcome(fast, bytearray(), 0, bad) == outcome(pure, bytearray(), 0, bad)
        for field in ("topic", "tx_id", "key", "body", "log_offset", "queue_id"):
            broken = R.Record(R.RecordType.MESSAGE, topic="t", tx_id="x", body=b"b")
            setattr(broken, field, 2**70 if field in ("log_offset", "queue_id") else 5)
            assert outcome(fast, bytearray(), 0, broken) == outcome(pure, bytearray(), 0, broken)
    good = bytes(pure_codec.python_codec(CRC).encode(rec))
    for name in ("decode_at",):
        pure, fast = twins[name]
        for bad in WRONG:
            for args in ((bad, 0, 0, 1 << 20, True), (good, bad, 0, 1 << 20, True),
                         (good, 0, 0, bad, True), (good, 0, bad, 1 << 20, True)):
                assert _same(outcome(fast, *args), outcome(pure, *args)), args
    pure, fast = twins["check"]
    for pos in (-1, len(good), len(good) + 5, 2**70):
        assert outcome(fast, good, pos) == outcome(pure, good, pos), pos


def test_this_process_runs_the_compiled_record_codec_unless_told_not_to() -> None:
    compiled("fmq.log.record._codec_c")
    want = "fmq.log.record.codec" if R.NO_EXTENSIONS else "fmq.log.record._codec_c"
    assert R.CODEC_MODULE.__name__ == want
