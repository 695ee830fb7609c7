"""The compiled protocol codecs (``fmq.protocol._struct_codecs_c``) against the generated pure ones
they are compiled from: the same bytes, the same decoded values, the same exception type and
message, on valid, truncated, corrupted, random and wrongly typed input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.protocol import struct_codecs as pure
from fmq.protocol.generate import all_structs
from fmq.protocol.structs import Struct, layout_of
from tests.native.twins import compiled, outcome
from tests.protocol.test_structs import HOSTILE, _sample, value_of

STRUCTS = {s.name: s for s in all_structs()}
NAMES = sorted(pure.CODECS)
#: Buffers of the wrong type a caller might pass to a decoder.
WRONG_BUFFERS = [None, 0, "text", ["x"], 1.5]


@pytest.fixture(scope="module")
def speedups():
    return compiled("fmq.protocol._struct_codecs_c")


def _encoded(encode, value) -> tuple:
    out = bytearray()
    got = outcome(encode, out, value)
    return got if got[0] == "raised" else ("value", bytes(out))


def _pair(speedups, name: str) -> tuple:
    return pure.CODECS[name], speedups.CODECS[name]


def test_every_pure_codec_has_its_compiled_twin(speedups) -> None:
    assert sorted(speedups.CODECS) == NAMES
    for name in NAMES:
        (layout, *fns), (layout_c, *fns_c) = _pair(speedups, name)
        assert layout == layout_c
        for fn, fn_c in zip(fns, fns_c, strict=True):
            assert fn is not fn_c and fn.__name__ == fn_c.__name__
            assert type(fn_c).__name__ == "cython_function_or_method", name


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_compiled_codec_equals_pure(speedups, name: str, data) -> None:
    (_, enc, dec), (_, enc_c, dec_c) = _pair(speedups, name)
    struct: Struct = STRUCTS[name]
    assert layout_of(struct.fields) == pure.CODECS[name][0]
    value = data.draw(value_of(struct))
    wire = _encoded(enc, value)
    assert _encoded(enc_c, value) == wire
    raw = wire[1]
    pieces = [raw, raw[:data.draw(st.integers(0, max(0, len(raw) - 1)))],
              data.draw(st.binary(max_size=80))]
    if raw:  # one byte changed: a length, a count, a flag or text
        flipped = bytearray(raw)
        flipped[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        pieces.append(bytes(flipped))
    pos = data.draw(st.integers(0, 3))
    for piece in pieces:
        for buf in (memoryview(piece), piece):
            assert outcome(dec_c, buf, 0) == outcome(dec, buf, 0)
        padded = memoryview(bytes(pos) + piece)
        assert outcome(dec_c, padded, pos) == outcome(dec, padded, pos)


@pytest.mark.parametrize("name", NAMES)
def test_compiled_codec_refuses_alike(speedups, name: str) -> None:
    (_, enc, dec), (_, enc_c, dec_c) = _pair(speedups, name)
    fields = STRUCTS[name].fields
    good = {n: _sample(t) for n, t in fields}
    for field, _ in fields:
        for bad in HOSTILE:
            value = {**good, field: bad}
            assert _encoded(enc_c, value) == _encoded(enc, value), (field, bad)
    for not_a_dict in (None, ["x"], "x", 7):
        assert _encoded(enc_c, not_a_dict) == _encoded(enc, not_a_dict)
    for buf in WRONG_BUFFERS:
        assert outcome(dec_c, buf, 0) == outcome(dec, buf, 0), buf
    for pos in (-1, 10**6, None, "0"):  # a position outside the buffer, or not a number
        assert outcome(dec_c, memoryview(b"\x00" * 8), pos) == outcome(dec, memoryview(b"\x00" * 8), pos)
