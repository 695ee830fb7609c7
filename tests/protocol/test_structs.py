"""The compiled struct codecs write and read exactly what the field types do one by one, and
refuse the same bad input with a ProtocolError (never another exception)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmq.errors import ProtocolError
from fmq.protocol import types as T
from fmq.protocol.schema import MESSAGE, SCHEMA, STORED_MESSAGE
from fmq.protocol.structs import Struct, Trailing

text = st.text(max_size=20)
VALUES = {
    T.U8: st.integers(0, 0xFF), T.U16: st.integers(0, 0xFFFF),
    T.U32: st.integers(0, 0xFFFF_FFFF), T.U64: st.integers(0, 2**64 - 1),
    T.I32: st.integers(-(2**31), 2**31 - 1), T.I64: st.integers(-(2**63), 2**63 - 1),
    T.BOOL: st.booleans(), T.STR: text, T.OPT_STR: st.none() | text, T.TEXT: text,
    T.BYTES: st.binary(max_size=40), T.PROPS: st.dictionaries(text, text, max_size=3),
}


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


def field_by_field_decode(fields, buf: memoryview) -> tuple[dict, int]:
    out, pos = {}, 0
    for name, ftype in fields:
        out[name], pos = ftype.decode(buf, pos)
    return out, pos


STRUCTS = [Struct(f"{spec.op.name} request", spec.request) for spec in SCHEMA.values()] + [
    Struct(f"{spec.op.name} response", spec.response) for spec in SCHEMA.values()
] + [MESSAGE, STORED_MESSAGE]


@pytest.mark.parametrize("struct", STRUCTS, ids=lambda s: s.name)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_compiled_codec_matches_the_field_types(struct: Struct, data) -> None:
    value = data.draw(value_of(struct))
    wire = field_by_field_encode(struct.fields, value)
    out = bytearray()
    struct.encode(out, value)
    assert bytes(out) == wire
    assert struct.decode(memoryview(wire), 0) == (value, len(wire))
    assert field_by_field_decode(struct.fields, memoryview(wire)) == (value, len(wire))
    # Where trailing fields begin, the payload ends as the older answer without them did.
    old_end = None
    if struct.fields and isinstance(struct.fields[-1][1], Trailing):
        name, trailing = struct.fields[-1]
        old_end = len(wire) - len(field_by_field_encode([(name, trailing)], value))
        assert struct.decode(memoryview(wire[:old_end]), 0) == ({**value, name: None}, old_end)
    for cut in range(len(wire)):  # every truncation is a ProtocolError, as field by field
        if cut == old_end:
            continue
        with pytest.raises(ProtocolError):
            struct.decode(memoryview(wire[:cut]), 0)


def test_compiled_encoder_refuses_what_the_field_types_refuse() -> None:
    good = {"topic": "t", "body": b"b", "key": None, "tags": None, "properties": {},
            "queue_id": -1}
    for field, bad, error in [("topic", None, "must not be null"), ("topic", 5, "needs a str"),
                              ("body", "text", "needs bytes"),
                              ("queue_id", 2**31, "needs an integer"),
                              ("queue_id", True, "needs an integer"),
                              ("topic", "x" * 0x10000, "limit")]:
        with pytest.raises(ProtocolError, match=error):
            MESSAGE.encode(bytearray(), {**good, field: bad})
    with pytest.raises(ProtocolError, match="missing field 'body'"):
        MESSAGE.encode(bytearray(), {k: v for k, v in good.items() if k != "body"})
    with pytest.raises(ProtocolError, match="needs a dict"):
        MESSAGE.encode(bytearray(), ["t"])
    out = bytearray()
    MESSAGE.encode(out, {**good, "body": bytearray(b"ab"), "topic": "é" * 30000})
    assert MESSAGE.decode(memoryview(bytes(out)), 0)[0]["body"] == b"ab"
