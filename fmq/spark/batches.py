"""Column-wise Arrow batches of the Spark source: the rows of many records of one segment
built at once from the segment's bytes and the record positions the scanner checked.

The scanner (:meth:`fmq.log.reader.SegmentReader.positions`) has checked every record's
length, CRC and header; here the 72-byte headers of a whole chunk are gathered into one
numpy array and read through a structured dtype laid out as
:data:`fmq.log.record.HEADER`, and the text fields become Arrow string columns straight
from their byte ranges (UTF-8 validated by Arrow, for the whole column at once). No Python
object is made per record, except the properties map of a record that has properties.

When a text field is not UTF-8 or a properties field does not parse (a record whose CRC
matches but whose content a bug wrote wrong), :class:`TextNotValid` is raised and the
source reads that segment again record by record (:mod:`fmq.spark.rows`), which reports
the record exactly as recovery would.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fmq.errors import BadRecord
from fmq.log.record import HEADER, HEADER_SIZE, NONE, RecordType, decode_properties
from fmq.spark.pushdown import PushedFilters
from fmq.spark.rows import (
    DAMAGE_ARROW,
    PROPERTIES_ARROW,
    TIMESTAMP_ARROW,
    TIMESTAMP_MAX_MS,
    TIMESTAMP_MIN_MS,
)

#: The record header as a numpy dtype: the same fields, offsets and little-endian types as
#: ``HEADER`` (a test compares the two on every record of a log).
HEADER_DTYPE = np.dtype({
    "names": ["length", "crc", "magic", "version", "type", "log_offset", "store_time",
              "queue_id", "queue_offset", "ref_offset", "ref_size", "topic_len", "tx_id_len",
              "group_len", "key_len", "tags_len", "flags", "props_len", "body_len"],
    "formats": ["<u4", "<u4", "<u2", "u1", "u1", "<u8", "<i8", "<i4", "<i8", "<i8", "<u4",
                "<u2", "<u2", "<u2", "<u2", "<u2", "<u2", "<u4", "<u4"],
    "offsets": [0, 4, 8, 10, 11, 12, 20, 28, 32, 40, 48, 52, 54, 56, 58, 60, 62, 64, 68],
    "itemsize": HEADER.size,
})
_HEADER_SPAN = np.arange(HEADER_SIZE, dtype=np.int64)
#: Record type names indexed by type code (a ``take`` turns codes into the type column).
_TYPE_CODES = np.full(256, -1, dtype=np.int32)
_TYPE_NAMES = pa.array([t.name for t in RecordType], pa.string())
for _i, _t in enumerate(RecordType):
    _TYPE_CODES[int(_t)] = _i


class TextNotValid(Exception):
    """A text or properties field of the chunk does not decode; read it record by record."""


def gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray,
                                                                               np.ndarray]:
    """The bytes ``data[starts[i] : starts[i] + lengths[i]]`` of every i, concatenated, and
    the int32 Arrow offsets of each piece in the result."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.empty(0, dtype=np.uint8), offsets.astype(np.int32)
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
    return data[index], offsets.astype(np.int32 if total < 2**31 else np.int64)


def _validity(present: np.ndarray) -> tuple[pa.Buffer | None, int]:
    nulls = int(len(present) - np.count_nonzero(present))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(present, bitorder="little")), nulls


def text_column(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A string column of the byte ranges; an empty range is null."""
    raw, offsets = gather(data, starts, lengths)
    validity, nulls = _validity(lengths > 0)
    kind = pa.string() if offsets.dtype == np.int32 else pa.large_string()
    column = pa.Array.from_buffers(kind, len(lengths),
                                   [validity, pa.py_buffer(offsets), pa.py_buffer(raw)],
                                   null_count=nulls)
    try:
        column.validate(full=True)  # UTF-8: the check decode() makes per field
    except pa.ArrowInvalid as exc:
        raise TextNotValid(str(exc)) from None
    return column if kind == pa.string() else column.cast(pa.string())


def body_column(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The bodies as a binary column (empty, never null, for records without one)."""
    raw, offsets = gather(data, starts, lengths)
    kind = pa.binary() if offsets.dtype == np.int32 else pa.large_binary()
    column = pa.Array.from_buffers(kind, len(lengths), [None, pa.py_buffer(offsets),
                                                        pa.py_buffer(raw)])
    return column if kind == pa.binary() else column.cast(pa.binary())


def _nullable(values: np.ndarray, absent: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    return pa.array(values, type=arrow_type, mask=absent if absent.any() else None)


def timestamp_column(store_time: np.ndarray) -> pa.Array:
    """``store_timestamp``: the store times (ms) as microseconds, null outside years 1 to
    9999 (:func:`fmq.spark.rows.timestamp_micros`, row by row)."""
    outside = (store_time < TIMESTAMP_MIN_MS) | (store_time > TIMESTAMP_MAX_MS)
    micros = np.where(outside, 0, store_time) * 1000
    return pa.array(micros, TIMESTAMP_ARROW, mask=outside if outside.any() else None)


def properties_column(buf, starts: np.ndarray, lengths: np.ndarray,
                      offsets: np.ndarray) -> pa.Array:
    """The properties maps (``{}`` when none); only records with properties are parsed,
    by the log's own :func:`~fmq.log.record.decode_properties`."""
    n = len(lengths)
    which = np.flatnonzero(lengths)
    if len(which) == 0:
        return pa.MapArray.from_arrays(np.zeros(n + 1, dtype=np.int32),
                                       pa.array([], pa.string()), pa.array([], pa.string()))
    maps: list = [[]] * n
    view = memoryview(buf)
    try:
        for i in which.tolist():
            s = int(starts[i])
            maps[i] = list(decode_properties(view[s : s + int(lengths[i])],
                                             int(offsets[i])).items())
    except BadRecord as exc:
        raise TextNotValid(str(exc)) from None
    return pa.array(maps, type=PROPERTIES_ARROW)


def record_batch(buf, positions: list[int], segment: str, with_body: bool,
                 schema: pa.Schema, pushed: PushedFilters | None = None) -> pa.RecordBatch:
    """The rows of the records at ``positions`` of the segment buffer ``buf`` (checked by
    the scanner), in the source's schema; with ``pushed``, only the rows that pass those
    filters (bodies are copied for those only)."""
    data = np.frombuffer(buf, dtype=np.uint8)
    pos = np.asarray(positions, dtype=np.int64)
    n = len(pos)
    h = data[pos[:, None] + _HEADER_SPAN].view(HEADER_DTYPE).ravel()
    lens = {name: h[name].astype(np.int64) for name in
            ("topic_len", "tx_id_len", "group_len", "key_len", "tags_len", "props_len",
             "body_len")}
    start = pos + HEADER_SIZE
    starts = {}
    for name in ("topic_len", "tx_id_len", "group_len", "key_len", "tags_len", "props_len",
                 "body_len"):
        starts[name] = start
        start = start + lens[name]
    queue_id, queue_offset, ref_offset = h["queue_id"], h["queue_offset"], h["ref_offset"]
    ref_size = h["ref_size"].astype(np.int64)
    columns = {
        "offset": pa.array(h["log_offset"].astype(np.int64), pa.int64()),
        "size": pa.array(h["length"].astype(np.int64), pa.int64()),
        "type": _TYPE_NAMES.take(pa.array(_TYPE_CODES[h["type"]])),
        "store_time": pa.array(h["store_time"], pa.int64()),
        "topic": text_column(data, starts["topic_len"], lens["topic_len"]),
        "queue_id": _nullable(queue_id, queue_id == NONE, pa.int32()),
        "queue_offset": _nullable(queue_offset, queue_offset == NONE, pa.int64()),
        "tx_id": text_column(data, starts["tx_id_len"], lens["tx_id_len"]),
        "producer_group": text_column(data, starts["group_len"], lens["group_len"]),
        "ref_offset": _nullable(ref_offset, ref_offset == NONE, pa.int64()),
        "ref_size": _nullable(ref_size, ref_size == 0, pa.int64()),
        "key": text_column(data, starts["key_len"], lens["key_len"]),
        "tags": text_column(data, starts["tags_len"], lens["tags_len"]),
        "properties": properties_column(buf, starts["props_len"], lens["props_len"],
                                        h["log_offset"]),
        "body_size": pa.array(lens["body_len"], pa.int64()),
        "segment": pa.repeat(pa.scalar(segment, pa.string()), n),
        "damage": pa.nulls(n, DAMAGE_ARROW),
        "store_timestamp": timestamp_column(h["store_time"]),
    }
    body_starts, body_lens = starts["body_len"], lens["body_len"]
    if pushed is not None and pushed.active:
        keep = pushed.mask(columns)
        if not keep.all():
            selected = pa.array(keep)
            columns = {name: column.filter(selected) for name, column in columns.items()}
            body_starts, body_lens = body_starts[keep], body_lens[keep]
    if with_body:
        columns["body"] = body_column(data, body_starts, body_lens)
    return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)
