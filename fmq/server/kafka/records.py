"""Record batches, magic 2 (Kafka's log format): decoded from Produce requests with their
CRC-32C checked and their records decompressed, encoded into Fetch answers.

Layout (docs: kafka.apache.org/documentation/#recordbatch): base offset i64, length i32,
partition leader epoch i32, magic i8, CRC-32C u32 over everything after it, attributes i16,
last offset delta i32, base and max timestamps i64, producer id i64, producer epoch i16,
base sequence i32, record count i32, records. A record: its length, attributes i8, then
timestamp delta, offset delta, key, value and headers, every length a zig-zag varint
(-1: null).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from crc32c import crc32c

from fmq.server.kafka.compression import NONE, DecompressionError, decompress

BATCH_HEAD = struct.Struct(">qiibI")  # base offset, length, leader epoch, magic, crc
BATCH_BODY = struct.Struct(">hiqqqhii")  # attributes .. record count
#: Bytes before the records: the head and the body's fixed fields.
BATCH_OVERHEAD = BATCH_HEAD.size + BATCH_BODY.size
#: Bytes of a batch counted in its length field: all after base offset and length.
LENGTH_FROM = 12
CRC_FROM = BATCH_HEAD.size

COMPRESSION_MASK = 0x07
TRANSACTIONAL = 0x10
CONTROL = 0x20


class RecordError(ValueError):
    """A batch that cannot be stored; ``code`` is Kafka's error code for it."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


CORRUPT_MESSAGE = 2
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
UNSUPPORTED_COMPRESSION_TYPE = 76


@dataclass
class KafkaRecord:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = -1


@dataclass
class DecodedBatch:
    records: list[KafkaRecord]
    producer_id: int
    producer_epoch: int
    base_sequence: int
    attributes: int

    @property
    def control(self) -> bool:
        return bool(self.attributes & CONTROL)


# ---------------------------------------------------------------- varints


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at ``pos``: (value, position after it)."""
    raw, shift = 0, 0
    while True:
        if pos >= len(data):
            raise RecordError(CORRUPT_MESSAGE, "a record ends inside a varint")
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise RecordError(CORRUPT_MESSAGE, "a varint is longer than 10 bytes")


def write_varint(out: bytearray, value: int) -> None:
    raw = (value << 1) ^ (value >> 63)
    raw &= 0xFFFF_FFFF_FFFF_FFFF
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _read_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(data, pos)
    if length < 0:
        return None, pos
    if pos + length > len(data):
        raise RecordError(CORRUPT_MESSAGE, "a record field runs past its record")
    return data[pos:pos + length], pos + length


def _write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(value))
        out += value


# ---------------------------------------------------------------- decoding


def decode_batches(data: bytes, max_size: int) -> list[DecodedBatch]:
    """Every batch of a partition's ``records`` field, checked. Raises RecordError."""
    batches = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < BATCH_OVERHEAD:
            raise RecordError(CORRUPT_MESSAGE, f"{len(data) - pos} bytes after the last "
                                               f"batch are no record batch")
        _base, length, _epoch, magic, crc = BATCH_HEAD.unpack_from(data, pos)
        if magic != 2:
            raise RecordError(UNSUPPORTED_FOR_MESSAGE_FORMAT,
                              f"message format v{magic} is not served: only record batches "
                              f"v2 (Kafka 0.11 and later clients)")
        end = pos + LENGTH_FROM + length
        if length < BATCH_OVERHEAD - LENGTH_FROM or end > len(data):
            raise RecordError(CORRUPT_MESSAGE, f"batch length {length} does not match the "
                                               f"{len(data) - pos} bytes given")
        if crc32c(memoryview(data)[pos + CRC_FROM:end]) != crc:
            raise RecordError(CORRUPT_MESSAGE, "record batch CRC-32C mismatch: the batch was "
                                               "damaged on its way")
        batches.append(_decode_batch(data[pos + BATCH_HEAD.size:end], max_size))
        pos = end
    return batches


def _decode_batch(body: bytes, max_size: int) -> DecodedBatch:
    (attributes, _last_delta, base_ts, _max_ts, producer_id, producer_epoch, base_sequence,
     count) = BATCH_BODY.unpack_from(body, 0)
    records_data = body[BATCH_BODY.size:]
    codec = attributes & COMPRESSION_MASK
    if codec != NONE:
        try:
            records_data = decompress(codec, records_data, max_size)
        except DecompressionError as exc:
            code = UNSUPPORTED_COMPRESSION_TYPE if codec > 4 else CORRUPT_MESSAGE
            raise RecordError(code, str(exc)) from None
    if count < 0 or count > len(records_data):
        raise RecordError(CORRUPT_MESSAGE, f"record count {count} does not fit the batch")
    try:
        records = _decode_records(records_data, count, base_ts)
    except IndexError:  # a varint read past the batch's last byte
        raise RecordError(CORRUPT_MESSAGE, "a record ends inside a varint") from None
    return DecodedBatch(records, producer_id, producer_epoch, base_sequence, attributes)


#: A one-byte varint's value, by its byte (zig-zag decoded): most fields of a record are one
#: byte (attributes, the deltas of a small batch, a null key, no headers).
_ONE_BYTE = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))


def _decode_records(data: bytes, count: int, base_ts: int) -> list[KafkaRecord]:
    """``count`` records of ``data`` (all of it). The hot loop of Produce: each varint is
    read inline when it is one byte (a call per field cost more than the rest of the
    record), every length is checked against the record's own, and the fields are sliced
    from ``data`` as they are. Raises RecordError, or IndexError for a varint past the end.
    Equal, error for error, to the field-by-field reading in tests/kafka/record_reference.py.
    """
    one = _ONE_BYTE
    size = len(data)
    records = []
    append = records.append
    new = KafkaRecord.__new__
    pos = 0
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            length, pos = one[b], pos + 1
        else:
            length, pos = read_varint(data, pos)
        end = pos + length
        if length < 1 or end > size:
            raise RecordError(CORRUPT_MESSAGE, f"record length {length} does not fit its "
                                               f"batch")
        pos += 1  # the attributes (unused in v2)
        b = data[pos]
        if b < 0x80:
            ts_delta, pos = one[b], pos + 1
        else:
            ts_delta, pos = read_varint(data, pos)
        b = data[pos]
        if b < 0x80:
            pos += 1  # the offset delta (the record's place says it)
        else:
            _, pos = read_varint(data, pos)
        b = data[pos]
        if b < 0x80:
            n, pos = one[b], pos + 1
        else:
            n, pos = read_varint(data, pos)
        if n < 0:
            key = None
        else:
            key, pos = data[pos:pos + n], pos + n
            if pos > end:
                raise RecordError(CORRUPT_MESSAGE, "a record field runs past its record")
        b = data[pos]
        if b < 0x80:
            n, pos = one[b], pos + 1
        else:
            n, pos = read_varint(data, pos)
        if n < 0:
            value = None
        else:
            value, pos = data[pos:pos + n], pos + n
            if pos > end:
                raise RecordError(CORRUPT_MESSAGE, "a record field runs past its record")
        b = data[pos]
        if b == 0:
            headers, pos = [], pos + 1
        else:
            headers, pos = _decode_headers(data, pos, end, length)
        if pos != end:
            raise RecordError(CORRUPT_MESSAGE, "a record's fields do not add up to its length")
        record = new(KafkaRecord)
        record.__dict__ = {"key": key, "value": value, "headers": headers,
                           "timestamp": base_ts + ts_delta}
        append(record)
    if pos != size:
        raise RecordError(CORRUPT_MESSAGE, f"{size - pos} bytes after the batch's {count} "
                                           f"records")
    return records


def _decode_headers(data: bytes, pos: int, end: int, length: int
                    ) -> tuple[list[tuple[str, bytes | None]], int]:
    header_count, pos = read_varint(data, pos)
    if header_count < 0 or header_count > length:
        raise RecordError(CORRUPT_MESSAGE, f"header count {header_count} does not fit the "
                                           f"record")
    record = data[:end]  # a field running past the record runs past this
    headers = []
    for _ in range(header_count):
        name, pos = _read_bytes(record, pos)
        if name is None:
            raise RecordError(CORRUPT_MESSAGE, "a header has a null name")
        value, pos = _read_bytes(record, pos)
        try:
            headers.append((name.decode("utf-8"), value))
        except UnicodeDecodeError:
            raise RecordError(CORRUPT_MESSAGE, "a header name is not UTF-8") from None
    return headers, pos


# ---------------------------------------------------------------- encoding


#: The bytes of every varint of one or two bytes, by zig-zag value: the fields of a record
#: (lengths of up to 8 KiB, deltas, counts) without a call per byte.
_SHORT = tuple(bytes([z]) if z < 0x80 else bytes([(z & 0x7F) | 0x80, z >> 7])
               for z in range(1 << 14))
_NULL = _SHORT[1]  # -1


def varint_bytes(value: int) -> bytes:
    """``value`` as a zig-zag varint."""
    z = ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    if z < 1 << 14:
        return _SHORT[z]
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def encode_batch(base_offset: int, records: list[tuple[int, KafkaRecord]],
                 leader_epoch: int = 0) -> bytes:
    """One uncompressed batch of ``records``, each given with its offset delta (queue
    offset minus ``base_offset``), their timestamps those of the records, stamped with the
    partition leader epoch ``leader_epoch``."""
    base_ts = min(r.timestamp for _, r in records)
    max_ts = max(r.timestamp for _, r in records)
    short, vb = _SHORT, varint_bytes
    parts = []
    append = parts.append
    for delta, record in records:
        key, value, headers = record.key, record.value, record.headers
        fields = [b"\0", vb(record.timestamp - base_ts), vb(delta)]  # attributes first
        if key is None:
            fields.append(_NULL)
        else:
            fields += (vb(len(key)), key)
        if value is None:
            fields.append(_NULL)
        else:
            fields += (vb(len(value)), value)
        if not headers:
            fields.append(short[0])
        else:
            fields.append(vb(len(headers)))
            for name, header in headers:
                encoded = name.encode("utf-8")
                fields += (vb(len(encoded)), encoded)
                if header is None:
                    fields.append(_NULL)
                else:
                    fields += (vb(len(header)), header)
        append(vb(sum(map(len, fields))))
        parts += fields
    last_delta = records[-1][0]
    after_crc = BATCH_BODY.pack(0, last_delta, base_ts, max_ts, -1, -1, -1,
                                len(records)) + b"".join(parts)
    length = BATCH_HEAD.size - LENGTH_FROM + len(after_crc)
    return (BATCH_HEAD.pack(base_offset, length, leader_epoch, 2, crc32c(after_crc))
            + after_crc)
