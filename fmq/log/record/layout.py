"""The record layout: the header, the field order, the record types, :class:`Record`, and
the properties field's encoding. :mod:`fmq.log.record`'s docstring is the spec."""

from __future__ import annotations

import struct
from enum import IntEnum

from fmq.errors import BadRecord

FORMAT_VERSION = 1
MAGIC = 0xF1F0
MAGIC_BYTES = struct.pack("<HB", MAGIC, FORMAT_VERSION)  # what a scanner searches for
MAGIC_POSITION = 8  # where MAGIC_BYTES sits inside a record

HEADER = struct.Struct("<IIHBBQqiqqIHHHHHHII")
HEADER_SIZE = HEADER.size  # 72
LENGTH = struct.Struct("<I")  # the length field, and the CRC field
U16 = struct.Struct("<H")
NONE = -1

#: Hard limits of the format itself; the broker's configured limits are lower.
MAX_SHORT_FIELD = 0xFFFF
FORMAT_MAX_RECORD = 0xFFFFFFFF


class RecordType(IntEnum):
    MESSAGE = 1
    PREPARE = 2
    PRE_MESSAGE = 3
    REF_MESSAGE = 4
    TX_MESSAGE = 5
    COMMIT = 6
    ROLLBACK = 7
    OFFSET = 8
    EPOCH = 9
    TIMER = 10
    TOPIC = 11
    FILLER = 127


TYPE_BY_CODE = {int(t): t for t in RecordType}  # a dict lookup, not an Enum call per record


class Record:
    """One decoded (or to-be-encoded) log record. ``size`` and ``log_offset`` are set by
    encoding/decoding; ``body`` may be a memoryview into a larger buffer after decoding."""

    __slots__ = ("type", "log_offset", "store_time", "queue_id", "queue_offset", "ref_offset",
                 "ref_size", "topic", "tx_id", "producer_group", "key", "tags", "properties",
                 "body", "size")

    def __init__(
        self,
        type: RecordType,
        *,
        log_offset: int = 0,
        store_time: int = 0,
        queue_id: int = NONE,
        queue_offset: int = NONE,
        ref_offset: int = NONE,
        ref_size: int = 0,
        topic: str = "",
        tx_id: str = "",
        producer_group: str = "",
        key: str | None = None,
        tags: str | None = None,
        properties: dict[str, str] | None = None,
        body: bytes | memoryview = b"",
        size: int = 0,
    ) -> None:
        self.type = type
        self.log_offset = log_offset
        self.store_time = store_time
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.ref_offset = ref_offset
        self.ref_size = ref_size
        self.topic = topic
        self.tx_id = tx_id
        self.producer_group = producer_group
        self.key = key
        self.tags = tags
        self.properties = properties
        self.body = body
        self.size = size

    @property
    def end_offset(self) -> int:
        return self.log_offset + self.size

    def to_dict(self, with_body: bool = False) -> dict:
        """A JSON-ready view (used by ``fmq log dump --json`` and the Spark source)."""
        out = {
            "offset": self.log_offset,
            "size": self.size,
            "type": RecordType(self.type).name,
            "store_time": self.store_time,
            "topic": self.topic or None,
            "queue_id": None if self.queue_id == NONE else self.queue_id,
            "queue_offset": None if self.queue_offset == NONE else self.queue_offset,
            "tx_id": self.tx_id or None,
            "producer_group": self.producer_group or None,
            "ref_offset": None if self.ref_offset == NONE else self.ref_offset,
            "ref_size": self.ref_size or None,
            "key": self.key,
            "tags": self.tags,
            "properties": self.properties or {},
            "body_size": len(self.body),
        }
        if with_body:
            out["body"] = bytes(self.body).decode("utf-8", "backslashreplace")
        return out

    def __repr__(self) -> str:
        return (
            f"Record({RecordType(self.type).name}, offset={self.log_offset}, size={self.size}, "
            f"topic={self.topic!r}, queue={self.queue_id}:{self.queue_offset}, "
            f"tx={self.tx_id!r}, ref={self.ref_offset}, body={len(self.body)}B)"
        )

def encode_properties(properties: dict[str, str] | None) -> bytes:
    if not properties:
        return b""
    parts = [U16.pack(len(properties))]
    for k, v in properties.items():
        kb = k.encode()
        vb = v.encode()
        if len(kb) > MAX_SHORT_FIELD or len(vb) > MAX_SHORT_FIELD:
            raise ValueError("a property key or value is longer than 65535 bytes")
        parts += (U16.pack(len(kb)), kb, U16.pack(len(vb)), vb)
    return b"".join(parts)


def properties_length(properties: dict[str, str] | None) -> int:
    """The bytes :func:`encode_properties` writes for ``properties``, without encoding them."""
    if not properties:
        return 0
    return 2 + sum(4 + len(k.encode()) + len(v.encode()) for k, v in properties.items())


def decode_properties(data: bytes | memoryview, offset: int = 0) -> dict[str, str]:
    """Parse encoded properties; ``offset`` is only used in error messages."""
    if not data:
        return {}
    end = len(data)
    if end < 2:
        raise BadRecord(offset, "properties field shorter than its count")
    (count,) = U16.unpack_from(data, 0)
    pos = 2
    out: dict[str, str] = {}
    try:
        for _ in range(count):
            for _half in (0, 1):
                if pos + 2 > end:
                    raise BadRecord(offset, "properties field truncated")
                (n,) = U16.unpack_from(data, pos)
                pos += 2
                if pos + n > end:
                    raise BadRecord(offset, "property longer than the properties field")
                if _half == 0:
                    k = bytes(data[pos : pos + n]).decode()
                else:
                    out[k] = bytes(data[pos : pos + n]).decode()
                pos += n
    except UnicodeDecodeError as exc:
        raise BadRecord(offset, f"property is not UTF-8: {exc}") from None
    if pos != end:
        raise BadRecord(offset, "trailing bytes after the properties")
    return out

