"""Field types of the wire protocol: pure encode into a ``bytearray`` and decode from a
``memoryview``. No I/O.

Every integer is **big-endian** (network order). A decoder checks each length against the
bytes that are left before it slices, and raises :class:`~fmq.errors.ProtocolError` on any
shortfall, bad UTF-8 or out-of-range value, so a hostile payload can never make it allocate
more than the frame holds.
"""

from __future__ import annotations

import struct
from typing import Any

from fmq.errors import ProtocolError

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

NULL16 = 0xFFFF  # length of an absent optional string


class FieldType:
    """One wire type. ``name`` is what docs/protocol.md calls it."""

    name = "?"

    def encode(self, out: bytearray, value: Any) -> None:
        raise NotImplementedError

    def decode(self, buf: memoryview, pos: int) -> tuple[Any, int]:
        raise NotImplementedError


def _need(buf: memoryview, pos: int, n: int, what: str) -> None:
    if pos + n > len(buf):
        raise ProtocolError(
            f"payload truncated: {what} needs {n} bytes at position {pos}, only "
            f"{max(0, len(buf) - pos)} left; the sender does not follow docs/protocol.md"
        )


class _Int(FieldType):
    def __init__(self, name: str, st: struct.Struct, lo: int, hi: int) -> None:
        self.name = name
        self.st = st
        self.lo = lo
        self.hi = hi

    def encode(self, out: bytearray, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not self.lo <= value <= self.hi:
            raise ProtocolError(f"{self.name} field needs an integer in {self.lo}..{self.hi}, "
                                f"got {value!r}")
        out += self.st.pack(value)

    def decode(self, buf: memoryview, pos: int) -> tuple[int, int]:
        n = self.st.size
        _need(buf, pos, n, self.name)
        return self.st.unpack_from(buf, pos)[0], pos + n


U8 = _Int("u8", _U8, 0, 0xFF)
U16 = _Int("u16", _U16, 0, 0xFFFF)
U32 = _Int("u32", _U32, 0, 0xFFFF_FFFF)
U64 = _Int("u64", _U64, 0, 0xFFFF_FFFF_FFFF_FFFF)
I32 = _Int("i32", _I32, -(1 << 31), (1 << 31) - 1)
I64 = _Int("i64", _I64, -(1 << 63), (1 << 63) - 1)


class _Bool(FieldType):
    name = "bool"

    def encode(self, out: bytearray, value: Any) -> None:
        out.append(1 if value else 0)

    def decode(self, buf: memoryview, pos: int) -> tuple[bool, int]:
        _need(buf, pos, 1, "bool")
        b = buf[pos]
        if b > 1:
            raise ProtocolError(f"bool field must be 0 or 1, got {b}")
        return b == 1, pos + 1


BOOL = _Bool()


def _utf8(raw: memoryview, what: str) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{what} field is not valid UTF-8: {exc}") from None


class _Str(FieldType):
    """u16 (or u32 for ``text``) byte length, then UTF-8. ``optional``: length 0xFFFF = null."""

    def __init__(self, name: str, st: struct.Struct, optional: bool) -> None:
        self.name = name
        self.st = st
        self.optional = optional
        self.max = (1 << (8 * st.size)) - 1 - (1 if optional else 0)

    def encode(self, out: bytearray, value: Any) -> None:
        if value is None:
            if not self.optional:
                raise ProtocolError(f"{self.name} field must not be null")
            out += self.st.pack(NULL16)
            return
        if not isinstance(value, str):
            raise ProtocolError(f"{self.name} field needs a str, got {type(value).__name__}")
        raw = value.encode("utf-8")
        if len(raw) > self.max:
            raise ProtocolError(f"{self.name} field is {len(raw)} bytes, the limit is {self.max}")
        out += self.st.pack(len(raw))
        out += raw

    def decode(self, buf: memoryview, pos: int) -> tuple[str | None, int]:
        size = self.st.size
        _need(buf, pos, size, self.name)
        n = self.st.unpack_from(buf, pos)[0]
        pos += size
        if self.optional and n == NULL16:
            return None, pos
        _need(buf, pos, n, self.name)
        return _utf8(buf[pos:pos + n], self.name), pos + n


STR = _Str("str", _U16, optional=False)
OPT_STR = _Str("optstr", _U16, optional=True)
TEXT = _Str("text", _U32, optional=False)


class _Bytes(FieldType):
    name = "bytes"

    def encode(self, out: bytearray, value: Any) -> None:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise ProtocolError(f"bytes field needs bytes, got {type(value).__name__}")
        n = len(value)
        if n > 0xFFFF_FFFF:
            raise ProtocolError(f"bytes field is {n} bytes, the limit is 4 GiB - 1")
        out += _U32.pack(n)
        out += value

    def decode(self, buf: memoryview, pos: int) -> tuple[bytes, int]:
        _need(buf, pos, 4, "bytes")
        n = _U32.unpack_from(buf, pos)[0]
        pos += 4
        _need(buf, pos, n, "bytes")
        return bytes(buf[pos:pos + n]), pos + n


BYTES = _Bytes()


class _Props(FieldType):
    """u16 count, then count pairs of ``str`` key, ``str`` value. Null is sent as count 0."""

    name = "props"

    def encode(self, out: bytearray, value: Any) -> None:
        value = value or {}
        if not isinstance(value, dict) or len(value) > 0xFFFF:
            raise ProtocolError("props field needs a dict of at most 65535 str pairs")
        out += _U16.pack(len(value))
        for k, v in value.items():
            STR.encode(out, k)
            STR.encode(out, v)

    def decode(self, buf: memoryview, pos: int) -> tuple[dict[str, str], int]:
        _need(buf, pos, 2, "props")
        n = _U16.unpack_from(buf, pos)[0]
        pos += 2
        out: dict[str, str] = {}
        for _ in range(n):
            k, pos = STR.decode(buf, pos)
            v, pos = STR.decode(buf, pos)
            out[k] = v
        return out, pos


PROPS = _Props()


class ListOf(FieldType):
    """u32 count, then the items. Each item takes at least one byte, so a count larger than
    the bytes left is refused before anything is allocated."""

    def __init__(self, item: FieldType) -> None:
        self.item = item
        self.name = f"list<{item.name}>"

    def encode(self, out: bytearray, value: Any) -> None:
        if not isinstance(value, (list, tuple)):
            raise ProtocolError(f"{self.name} field needs a list, got {type(value).__name__}")
        out += _U32.pack(len(value))
        enc = self.item.encode
        for v in value:
            enc(out, v)

    def decode(self, buf: memoryview, pos: int) -> tuple[list, int]:
        _need(buf, pos, 4, self.name)
        n = _U32.unpack_from(buf, pos)[0]
        pos += 4
        if n > len(buf) - pos:
            raise ProtocolError(f"{self.name} claims {n} items but only {len(buf) - pos} "
                                f"bytes are left")
        dec = self.item.decode
        out = []
        for _ in range(n):
            v, pos = dec(buf, pos)
            out.append(v)
        return out, pos


class Struct(FieldType):
    """Named fields in a fixed order; the Python value is a dict."""

    def __init__(self, name: str, fields: list[tuple[str, FieldType]]) -> None:
        self.name = name
        self.fields = fields

    def encode(self, out: bytearray, value: Any) -> None:
        if not isinstance(value, dict):
            raise ProtocolError(f"{self.name} needs a dict, got {type(value).__name__}")
        for fname, ftype in self.fields:
            try:
                fvalue = value[fname]
            except KeyError:
                raise ProtocolError(f"{self.name} is missing field {fname!r}") from None
            ftype.encode(out, fvalue)

    def decode(self, buf: memoryview, pos: int) -> tuple[dict, int]:
        out = {}
        for fname, ftype in self.fields:
            out[fname], pos = ftype.decode(buf, pos)
        return out, pos
