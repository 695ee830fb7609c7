"""The record batch codec as first written, field by field (a call per varint, a slice and a
buffer per record): the reference the fast codec of :mod:`fmq.server.kafka.records` must
equal, record for record, byte for byte and error code for error code
(tests/kafka/test_records.py)."""

from __future__ import annotations

from crc32c import crc32c

from fmq.server.kafka.compression import NONE, DecompressionError, decompress
from fmq.server.kafka.records import (
    BATCH_BODY,
    BATCH_HEAD,
    BATCH_OVERHEAD,
    COMPRESSION_MASK,
    CORRUPT_MESSAGE,
    CRC_FROM,
    LENGTH_FROM,
    UNSUPPORTED_COMPRESSION_TYPE,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    DecodedBatch,
    KafkaRecord,
    RecordError,
    read_varint,
    write_varint,
)


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
    records = []
    pos = 0
    for _ in range(count):
        record, pos = _decode_record(records_data, pos, base_ts)
        records.append(record)
    if pos != len(records_data):
        raise RecordError(CORRUPT_MESSAGE, f"{len(records_data) - pos} bytes after the "
                                           f"batch's {count} records")
    return DecodedBatch(records, producer_id, producer_epoch, base_sequence, attributes)


def _decode_record(data: bytes, pos: int, base_ts: int) -> tuple[KafkaRecord, int]:
    length, pos = read_varint(data, pos)
    end = pos + length
    if length < 1 or end > len(data):
        raise RecordError(CORRUPT_MESSAGE, f"record length {length} does not fit its batch")
    record = data[pos:end]
    pos = 1  # after the attributes (unused in v2)
    ts_delta, pos = read_varint(record, pos)
    _offset_delta, pos = read_varint(record, pos)
    key, pos = _read_bytes(record, pos)
    value, pos = _read_bytes(record, pos)
    header_count, pos = read_varint(record, pos)
    if header_count < 0 or header_count > length:
        raise RecordError(CORRUPT_MESSAGE, f"header count {header_count} does not fit the "
                                           f"record")
    headers = []
    for _ in range(header_count):
        name, pos = _read_bytes(record, pos)
        if name is None:
            raise RecordError(CORRUPT_MESSAGE, "a header has a null name")
        value_, pos = _read_bytes(record, pos)
        try:
            headers.append((name.decode("utf-8"), value_))
        except UnicodeDecodeError:
            raise RecordError(CORRUPT_MESSAGE, "a header name is not UTF-8") from None
    if pos != length:
        raise RecordError(CORRUPT_MESSAGE, "a record's fields do not add up to its length")
    return KafkaRecord(key, value, headers, base_ts + ts_delta), end


def encode_batch(base_offset: int, records: list[tuple[int, KafkaRecord]]) -> bytes:
    """One uncompressed batch of ``records``, each given with its offset delta (queue
    offset minus ``base_offset``), their timestamps those of the records."""
    base_ts = min(r.timestamp for _, r in records)
    max_ts = max(r.timestamp for _, r in records)
    body = bytearray()
    for delta, record in records:
        rec = bytearray(b"\0")  # attributes
        write_varint(rec, record.timestamp - base_ts)
        write_varint(rec, delta)
        _write_bytes(rec, record.key)
        _write_bytes(rec, record.value)
        write_varint(rec, len(record.headers))
        for name, value in record.headers:
            _write_bytes(rec, name.encode("utf-8"))
            _write_bytes(rec, value)
        write_varint(body, len(rec))
        body += rec
    last_delta = records[-1][0]
    after_crc = BATCH_BODY.pack(0, last_delta, base_ts, max_ts, -1, -1, -1,
                                len(records)) + body
    length = BATCH_HEAD.size - LENGTH_FROM + len(after_crc)
    return BATCH_HEAD.pack(base_offset, length, 0, 2, crc32c(after_crc)) + after_crc
