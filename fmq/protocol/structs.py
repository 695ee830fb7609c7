"""Struct, the wire's record of named fields, and its reference codec.

A struct's bytes are its fields' bytes in order, each written and read by its field type.
That field-by-field loop is the reference (:meth:`Struct.reference`); the codec a struct
uses comes from the implementation ``fmq.protocol._impl`` chooses (the generated straight-line
functions of ``struct_codecs.py``, or its compiled twin), which gives the same bytes and errors
faster. A struct the generated module does not know with exactly these fields (one made
outside the schema) uses the reference.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fmq.errors import ProtocolError
from fmq.protocol._impl import codec_for
from fmq.protocol.types import FieldType

Decoder = Callable[[memoryview, int], tuple[dict, int]]
Encoder = Callable[[bytearray, Any], None]


def codec_ident(name: str) -> str:
    """The Python name part of a struct's generated functions ("send request" -> send_request)."""
    return re.sub(r"\W", "_", name)


def layout_of(fields: list[tuple[str, FieldType]]) -> str:
    """The fields' names and types, the key a generated codec must match to be used."""
    return " ".join(f"{fname}:{ftype.name}" for fname, ftype in fields)


def reference_encoder(name: str, fields: list[tuple[str, FieldType]]) -> Encoder:
    """``encode(out, value)`` calling each field type's own ``encode`` in turn."""

    def encode(out: bytearray, value: Any) -> None:
        if not isinstance(value, dict):
            raise ProtocolError(f"{name} needs a dict, got {type(value).__name__}")
        try:
            # A trailing field may be left out of the dict as well as given as None.
            values = [value.get(fname) if isinstance(ftype, Trailing) else value[fname]
                      for fname, ftype in fields]
        except KeyError as exc:
            raise ProtocolError(f"{name} is missing field {exc.args[0]!r}") from None
        for (_fname, ftype), v in zip(fields, values, strict=True):
            ftype.encode(out, v)

    return encode


def reference_decoder(fields: list[tuple[str, FieldType]]) -> Decoder:
    """``decode(buf, pos) -> (dict, pos)`` calling each field type's own ``decode``."""

    def decode(buf: memoryview, pos: int) -> tuple[dict, int]:
        out = {}
        for fname, ftype in fields:
            out[fname], pos = ftype.decode(buf, pos)
        return out, pos

    return decode


class Struct(FieldType):
    """Named fields in a fixed order; the Python value is a dict."""

    def __init__(self, name: str, fields: list[tuple[str, FieldType]]) -> None:
        self.name = name
        self.fields = fields
        self.reference = (reference_encoder(name, fields), reference_decoder(fields))
        self._encode, self._decode = (codec_for(name, layout_of(fields))
                                      or self.reference)

    def encode(self, out: bytearray, value: Any) -> None:
        self._encode(out, value)

    def decode(self, buf: memoryview, pos: int) -> tuple[dict, int]:
        return self._decode(buf, pos)


class Trailing(Struct):
    """Fields appended to the end of a payload that a peer may leave out: absent (None)
    when the payload ends before them, written only when the value is not None. Only the
    last field of a payload may be one (nothing can follow something optional), so a
    newer answer keeps the exact bytes of the older one when it leaves them out."""

    def encode(self, out: bytearray, value: Any) -> None:
        if value is not None:
            self._encode(out, value)

    def decode(self, buf: memoryview, pos: int) -> tuple[dict | None, int]:
        if pos == len(buf):
            return None, pos
        return self._decode(buf, pos)
