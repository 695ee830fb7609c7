"""Struct, the wire's record of named fields, with its codec compiled to straight-line
Python: the same bytes and the same errors as calling each field type's own
``encode``/``decode`` in turn, without a call and a tuple per field.

A struct's fields are known when the schema table is built, so its codec is written out
once as one function (the technique of ``dataclasses`` and ``namedtuple``): consecutive
integers become one ``struct`` call, strings and bytes are read in place, and only lists,
properties and nested structs call their type. The generic per-field loop costs about three
times as much per SEND, and a request is decoded on the server's event loop.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from fmq.errors import ProtocolError
from fmq.protocol.types import (
    NULL16,
    BoolField,
    BytesField,
    FieldType,
    IntField,
    StrField,
    need_bytes,
    utf8_text,
)

Decoder = Callable[[memoryview, int], tuple[dict, int]]
Encoder = Callable[[bytearray, Any], None]


def compile_decoder(name: str, fields: list[tuple[str, FieldType]]) -> Decoder:
    """``decode(buf, pos) -> (dict, pos)`` for a struct of ``fields``."""
    env: dict[str, Any] = {"need_bytes": need_bytes, "utf8_text": utf8_text, "NULL16": NULL16,
                           "ProtocolError": ProtocolError}
    lines = ["def decode(buf, pos):", "    end = len(buf)"]
    i = 0
    while i < len(fields):
        fname, ftype = fields[i]
        if isinstance(ftype, IntField):  # a run of integers: one unpack
            run = [fields[i]]
            while i + len(run) < len(fields) and isinstance(fields[i + len(run)][1], IntField):
                run.append(fields[i + len(run)])
            st = struct.Struct(">" + "".join(t.st.format.lstrip(">") for _n, t in run))
            env[f"S{i}"] = st.unpack_from
            targets = ", ".join(f"v{i + k}" for k in range(len(run)))
            what = run[0][1].name if len(run) == 1 else f"{name} integers"
            lines += [f"    if pos + {st.size} > end: need_bytes(buf, pos, {st.size}, {what!r})",
                      f"    {targets}, = S{i}(buf, pos)", f"    pos += {st.size}"]
            i += len(run)
            continue
        v = f"v{i}"
        if isinstance(ftype, StrField):
            size = ftype.st.size
            env[f"L{i}"] = ftype.st.unpack_from
            lines += [f"    if pos + {size} > end: need_bytes(buf, pos, {size}, {ftype.name!r})",
                      f"    n = L{i}(buf, pos)[0]", f"    pos += {size}"]
            body = [f"if pos + n > end: need_bytes(buf, pos, n, {ftype.name!r})",
                    f"{v} = utf8_text(buf[pos:pos + n], {ftype.name!r})", "pos += n"]
            if ftype.optional:
                lines += [f"    if n == NULL16: {v} = None", "    else:"]
                lines += ["        " + b for b in body]
            else:
                lines += ["    " + b for b in body]
        elif isinstance(ftype, BytesField):
            env["U32"] = struct.Struct(">I").unpack_from
            lines += ["    if pos + 4 > end: need_bytes(buf, pos, 4, 'bytes')",
                      "    n = U32(buf, pos)[0]", "    pos += 4",
                      "    if pos + n > end: need_bytes(buf, pos, n, 'bytes')",
                      f"    {v} = bytes(buf[pos:pos + n])", "    pos += n"]
        elif isinstance(ftype, BoolField):
            lines += ["    if pos + 1 > end: need_bytes(buf, pos, 1, 'bool')",
                      f"    {v} = buf[pos]", "    pos += 1",
                      f"    if {v} > 1: raise ProtocolError("
                      f"f'bool field must be 0 or 1, got {{{v}}}')",
                      f"    {v} = {v} == 1"]
        else:
            env[f"D{i}"] = ftype.decode
            lines.append(f"    {v}, pos = D{i}(buf, pos)")
        i += 1
    items = ", ".join(f"{fname!r}: v{k}" for k, (fname, _t) in enumerate(fields))
    lines.append(f"    return {{{items}}}, pos")
    return _define("decode", lines, env)


def compile_encoder(name: str, fields: list[tuple[str, FieldType]]) -> Encoder:
    """``encode(out, value)`` for a struct of ``fields`` (``value`` a dict)."""
    env: dict[str, Any] = {"ProtocolError": ProtocolError, "NULL16": NULL16}
    lines = ["def encode(out, value):",
             "    if not isinstance(value, dict):",
             f"        raise ProtocolError(f'{name} needs a dict, got "
             "{type(value).__name__}')",
             ]
    if fields:
        lines.append("    try:")
        # A trailing field may be left out of the dict as well as given as None.
        lines += [f"        v{k} = value.get({fname!r})" if isinstance(ftype, Trailing)
                  else f"        v{k} = value[{fname!r}]"
                  for k, (fname, ftype) in enumerate(fields)]
        lines += ["    except KeyError as exc:",
                  f"        raise ProtocolError(f'{name} is missing field {{exc.args[0]!r}}') "
                  "from None"]
    for k, (_fname, ftype) in enumerate(fields):
        v = f"v{k}"
        if isinstance(ftype, IntField):
            env[f"P{k}"] = ftype.st.pack
            lines += [f"    if type({v}) is not int or not {ftype.lo} <= {v} <= {ftype.hi}:",
                      f"        E{k}(out, {v})",  # the type's own check raises its error
                      f"    out += P{k}({v})"]
            env[f"E{k}"] = ftype.encode
        elif isinstance(ftype, StrField):
            env[f"P{k}"] = ftype.st.pack
            env[f"E{k}"] = ftype.encode
            lines += [f"    if type({v}) is str and len({v}) <= {ftype.max // 4}:",
                      f"        raw = {v}.encode()",
                      f"        out += P{k}(len(raw))",
                      "        out += raw",
                      "    else:",
                      f"        E{k}(out, {v})"]
        elif isinstance(ftype, BytesField):
            env["PU32"] = struct.Struct(">I").pack
            env[f"E{k}"] = ftype.encode
            lines += [f"    if type({v}) is bytes and len({v}) <= 0xFFFFFFFF:",
                      f"        out += PU32(len({v}))",
                      f"        out += {v}",
                      "    else:",
                      f"        E{k}(out, {v})"]
        else:
            env[f"E{k}"] = ftype.encode
            lines.append(f"    E{k}(out, {v})")
    return _define("encode", lines, env)


def _define(fn_name: str, lines: list[str], env: dict[str, Any]) -> Callable:
    exec(compile("\n".join(lines) + "\n", f"<fmq.protocol {fn_name}>", "exec"), env)  # noqa: S102
    return env[fn_name]


class Struct(FieldType):
    """Named fields in a fixed order; the Python value is a dict."""

    def __init__(self, name: str, fields: list[tuple[str, FieldType]]) -> None:
        self.name = name
        self.fields = fields
        self._decode = compile_decoder(name, fields)
        self._encode = compile_encoder(name, fields)

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
