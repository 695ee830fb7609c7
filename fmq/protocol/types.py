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


def need_bytes(buf: memoryview, pos: int, n: int, what: str) -> None:
    if pos + n > len(buf):
        raise ProtocolError(
            f"payload truncated: {what} needs {n} bytes at position {pos}, only "
            f"{max(0, len(buf) - pos)} left; the sender does not follow docs/protocol.md"
        )


class IntField(FieldType):
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
        need_bytes(buf, pos, n, self.name)
        return self.st.unpack_from(buf, pos)[0], pos + n


U8 = IntField("u8", _U8, 0, 0xFF)
U16 = IntField("u16", _U16, 0, 0xFFFF)
U32 = IntField("u32", _U32, 0, 0xFFFF_FFFF)
U64 = IntField("u64", _U64, 0, 0xFFFF_FFFF_FFFF_FFFF)
I32 = IntField("i32", _I32, -(1 << 31), (1 << 31) - 1)
I64 = IntField("i64", _I64, -(1 << 63), (1 << 63) - 1)


class BoolField(FieldType):
    name = "bool"

    def encode(self, out: bytearray, value: Any) -> None:
        out.append(1 if value else 0)

    def decode(self, buf: memoryview, pos: int) -> tuple[bool, int]:
        need_bytes(buf, pos, 1, "bool")
        b = buf[pos]
        if b > 1:
            raise ProtocolError(f"bool field must be 0 or 1, got {b}")
        return b == 1, pos + 1


BOOL = BoolField()


def utf8_text(raw: memoryview, what: str) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{what} field is not valid UTF-8: {exc}") from None


class StrField(FieldType):
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
        need_bytes(buf, pos, size, self.name)
        n = self.st.unpack_from(buf, pos)[0]
        pos += size
        if self.optional and n == NULL16:
            return None, pos
        need_bytes(buf, pos, n, self.name)
        return utf8_text(buf[pos:pos + n], self.name), pos + n


STR = StrField("str", _U16, optional=False)
OPT_STR = StrField("optstr", _U16, optional=True)
TEXT = StrField("text", _U32, optional=False)


class BytesField(FieldType):
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
        need_bytes(buf, pos, 4, "bytes")
        n = _U32.unpack_from(buf, pos)[0]
        pos += 4
        need_bytes(buf, pos, n, "bytes")
        return bytes(buf[pos:pos + n]), pos + n


BYTES = BytesField()


class PropsField(FieldType):
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
        need_bytes(buf, pos, 2, "props")
        n = _U16.unpack_from(buf, pos)[0]
        pos += 2
        out: dict[str, str] = {}
        for _ in range(n):
            k, pos = STR.decode(buf, pos)
            v, pos = STR.decode(buf, pos)
            out[k] = v
        return out, pos


PROPS = PropsField()


class Encoded:
    """The items of a list field, already encoded: ``count`` items in ``data`` (a server
    that keeps encoded messages copies them into an answer instead of encoding again)."""

    __slots__ = ("count", "data")

    def __init__(self, count: int, data: bytes) -> None:
        self.count = count
        self.data = data


class Packed:
    """A whole payload already encoded by the code that made the answer (the send path's
    answer, packed with one struct call instead of a field dict through the codec)."""

    __slots__ = ("payload",)

    def __init__(self, payload: bytes) -> None:
        self.payload = payload


class ListOf(FieldType):
    """u32 count, then the items. Each item takes at least one byte, so a count larger than
    the bytes left is refused before anything is allocated."""

    def __init__(self, item: FieldType) -> None:
        self.item = item
        self.name = f"list<{item.name}>"

    def encode(self, out: bytearray, value: Any) -> None:
        if type(value) is Encoded:
            out += _U32.pack(value.count)
            out += value.data
            return
        if not isinstance(value, (list, tuple)):
            raise ProtocolError(f"{self.name} field needs a list, got {type(value).__name__}")
        out += _U32.pack(len(value))
        enc = self.item.encode
        for v in value:
            enc(out, v)

    def decode(self, buf: memoryview, pos: int) -> tuple[list, int]:
        need_bytes(buf, pos, 4, self.name)
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
