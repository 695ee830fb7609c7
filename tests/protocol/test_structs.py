"""Every implementation of the struct codecs writes and reads exactly what the field types do
one by one, and refuses the same bad input with the same ProtocolError (never another
exception): one set of cases, run against the reference (field by field), the generated
pure Python, and whatever ``fmq.protocol._impl`` chose for this process (a compiled twin
when one is installed)."""

from __future__ import annotations

from enum import IntEnum

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fmq.errors import ProtocolError
from fmq.protocol import _impl
from fmq.protocol import struct_codecs as pure
from fmq.protocol import types as T
from fmq.protocol.frame import REQUEST_STRUCTS
from fmq.protocol.generate import all_structs
from fmq.protocol.schema import MESSAGE, Op
from fmq.protocol.structs import Struct, layout_of

STRUCTS = all_structs()
text = st.text(max_size=20)
VALUES = {
    T.U8: st.integers(0, 0xFF), T.U16: st.integers(0, 0xFFFF),
    T.U32: st.integers(0, 0xFFFF_FFFF), T.U64: st.integers(0, 2**64 - 1),
    T.I32: st.integers(-(2**31), 2**31 - 1), T.I64: st.integers(-(2**63), 2**63 - 1),
    T.BOOL: st.booleans(), T.STR: text, T.OPT_STR: st.none() | text, T.TEXT: text,
    T.BYTES: st.binary(max_size=40), T.PROPS: st.dictionaries(text, text, max_size=3),
}


class Level(IntEnum):  # an int subclass: a valid integer all the same
    THREE = 3


#: Values the wire cannot carry, or can only just carry, for each kind of field.
HOSTILE = [None, "x", 1, -1, 2**64, True, 1.5, b"b", bytearray(b"ba"), ["l"], {"k": "v"},
           {"k": 1}, Level.THREE, "x" * 0x4000, "é" * 0x4000, "x" * 0x10000, T.Encoded(1, b"")]


def value_of(ftype: T.FieldType) -> st.SearchStrategy:
    if isinstance(ftype, Struct):
        return st.fixed_dictionaries({n: value_of(t) for n, t in ftype.fields})
    if isinstance(ftype, T.ListOf):
        return st.lists(value_of(ftype.item), max_size=3)
    return VALUES[ftype]


def field_by_field_encode(fields, value) -> bytes:
    out = bytearray()
    for name, ftype in fields:
        ftype.encode(out, value[name])
    return bytes(out)


def _codec(kind: str, struct: Struct):
    if kind == "reference":
        return struct.reference
    found = _impl.codec_for(struct.name, layout_of(struct.fields),
                            pure if kind == "generated" else None)
    assert found is not None, f"no {kind} codec for {struct.name}: run python -m fmq.protocol.generate"
    return found


@pytest.fixture(params=["reference", "generated", "chosen"])
def kind(request) -> str:
    return request.param


def outcome(fn, *args):
    """What a call gives: its result, or its ProtocolError's message (any other exception
    fails the test)."""
    try:
        return "ok", fn(*args)
    except ProtocolError as exc:
        return "error", str(exc)


def encoded(encode, value):
    out = bytearray()
    result = outcome(encode, out, value)
    return result if result[0] == "error" else ("ok", bytes(out))


@pytest.mark.parametrize("struct", STRUCTS, ids=lambda s: s.name)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_codec_matches_the_field_types(kind: str, struct: Struct, data) -> None:
    encode, decode = _codec(kind, struct)
    value = data.draw(value_of(struct))
    wire = field_by_field_encode(struct.fields, value)
    assert encoded(encode, value) == ("ok", wire)
    assert decode(memoryview(wire), 0) == (value, len(wire))
    ref_decode = struct.reference[1]
    for cut in range(len(wire)):  # every truncation: the reference's answer
        piece = memoryview(wire[:cut])
        assert same_decoding(outcome(decode, piece, 0), outcome(ref_decode, piece, 0))
    garbage = data.draw(st.binary(max_size=60))  # anything a hostile peer may send
    assert same_decoding(outcome(decode, memoryview(garbage), 0),
                         outcome(ref_decode, memoryview(garbage), 0))


def same_decoding(got, reference) -> bool:
    """The same value, or a ProtocolError for both. The messages may differ: a run of
    integers is read at once, so its shortfall is the run's ("send_at request integers
    needs 16 bytes"), where the reference names the first integer missing."""
    return got == reference or got[0] == reference[0] == "error"


def test_a_truncated_run_of_integers_is_named_as_before() -> None:
    encode, decode = _codec("generated", REQUEST_STRUCTS[Op.PULL])
    with pytest.raises(ProtocolError, match="pull request integers needs 20 bytes at position 3"):
        decode(memoryview(b"\x00\x01t" + bytes(19)), 0)


@pytest.mark.parametrize("struct", [s for s in STRUCTS if s.fields], ids=lambda s: s.name)
def test_codec_refuses_what_the_field_types_refuse(kind: str, struct: Struct) -> None:
    encode, _decode = _codec(kind, struct)
    ref_encode = struct.reference[0]
    good = {name: _sample(ftype) for name, ftype in struct.fields}
    for name, _ftype in struct.fields:
        for bad in HOSTILE:
            value = {**good, name: bad}
            assert encoded(encode, value) == encoded(ref_encode, value), (name, bad)
        missing = {k: v for k, v in good.items() if k != name}
        assert encoded(encode, missing) == encoded(ref_encode, missing)
    for not_a_dict in (None, ["x"], "x"):
        assert encoded(encode, not_a_dict) == encoded(ref_encode, not_a_dict)


def _sample(ftype: T.FieldType):
    if isinstance(ftype, Struct):
        return {n: _sample(t) for n, t in ftype.fields}
    if isinstance(ftype, T.ListOf):
        return [_sample(ftype.item)]
    return {T.BOOL: True, T.STR: "s", T.OPT_STR: None, T.TEXT: "t", T.BYTES: b"b",
            T.PROPS: {"k": "v"}}.get(ftype, 1)


def test_an_int_subclass_is_written_once(kind: str) -> None:
    encode, decode = _codec(kind, MESSAGE)
    value = {"topic": "t", "body": b"", "key": None, "tags": None, "properties": {},
             "queue_id": Level.THREE}
    out = bytearray()
    encode(out, value)
    assert decode(memoryview(bytes(out)), 0) == ({**value, "queue_id": 3}, len(out))


def test_named_errors_are_kept(kind: str) -> None:
    encode, _decode = _codec(kind, MESSAGE)
    good = {"topic": "t", "body": b"b", "key": None, "tags": None, "properties": {},
            "queue_id": -1}
    for field, bad, error in [("topic", None, "must not be null"), ("topic", 5, "needs a str"),
                              ("body", "text", "needs bytes"),
                              ("queue_id", 2**31, "needs an integer"),
                              ("queue_id", True, "needs an integer"),
                              ("topic", "x" * 0x10000, "limit")]:
        with pytest.raises(ProtocolError, match=error):
            encode(bytearray(), {**good, field: bad})
    with pytest.raises(ProtocolError, match="missing field 'body'"):
        encode(bytearray(), {k: v for k, v in good.items() if k != "body"})
    with pytest.raises(ProtocolError, match="needs a dict"):
        encode(bytearray(), ["t"])
