"""The index items of a batch of record rows, computed column-wise (numpy and pyarrow
compute) on the executors: what :func:`fmq.index.entries.queue_entry`,
:func:`fmq.index.entries.tx_end` and ``timer_changes`` give per record, turned into the keys and values of
:func:`fmq.index.keys.entry_items` and :func:`fmq.index.keys.end_items`, for a whole Arrow
batch at once.

The byte layouts are the index's own ``struct`` formats (:mod:`fmq.index.keys`) read as
numpy dtypes; ``tests/spark/test_items.py`` checks every item against the per-record
functions on a log with every record type.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fmq.index import keys as K
from fmq.index.entries import tag_hash

ITEMS_ARROW = pa.schema([("db", pa.int32()), ("key", pa.binary()), ("value", pa.binary())])
#: Record types that become queue entries, and those that end a transaction.
INDEXED_TYPES = ("MESSAGE", "REF_MESSAGE", "TX_MESSAGE")
END_TYPES = ("COMMIT", "ROLLBACK")
TIMER_TYPE = "TIMER"
_NUL = pa.scalar(b"\x00", pa.binary())
_EMPTY = pa.scalar(b"", pa.binary())


def _dtype(fmt: str, names: list[str]) -> np.dtype:
    """A packed numpy dtype with the fields of the ``struct`` format ``fmt`` (one byte-order
    character, then one code per field)."""
    order, codes = fmt[0], fmt[1:]
    kinds = {"I": "u4", "Q": "u8", "q": "i8", "B": "u1"}
    np_order = ">" if order == ">" else "<"
    return np.dtype([(n, np_order + kinds[c]) for n, c in zip(names, codes, strict=True)])


_QID_QOFF = _dtype(K.QID_QOFF.format, ["qid", "qoff"])
_QID_TIME_QOFF = _dtype(K.QID_TIME_QOFF.format, ["qid", "time", "qoff"])
_U64BE = _dtype(K.U64BE.format, ["v"])
_CQ_VALUE = _dtype(K.CQ_VALUE.format, ["data_offset", "data_size", "tag_hash", "store_time",
                                       "source_offset"])
_KEY_VALUE = _dtype(K.KEY_VALUE.format, ["qid", "qoff"])
_TX_END_VALUE = _dtype(K.TX_END_VALUE.format, ["committed", "offset"])
_TIMER_KEY = _dtype(K.TIMER_KEY.format, ["due", "offset"])
_TIMER_VALUE = _dtype(K.TIMER_VALUE.format, ["size"])
_I64 = _dtype(K.TIMER_COUNT.format, ["v"])


def _packed(dtype: np.dtype, **fields: np.ndarray) -> pa.Array:
    """One binary value per row: the row's fields packed as ``dtype``."""
    n = len(next(iter(fields.values())))
    rows = np.empty(n, dtype=dtype)
    for name, values in fields.items():
        rows[name] = values
    fixed = pa.Array.from_buffers(pa.binary(dtype.itemsize), n, [None, pa.py_buffer(rows)])
    return fixed.cast(pa.binary())


def _join(*parts) -> pa.Array:
    return pc.binary_join_element_wise(*parts, _EMPTY)


def _np(column: pa.Array, fill: int = 0) -> np.ndarray:
    return column.fill_null(fill).to_numpy(zero_copy_only=False)


def _tag_hashes(tags: pa.Array) -> np.ndarray:
    """``tag_hash`` of every row, computed once per distinct tags value."""
    encoded = tags.dictionary_encode()
    per_value = np.array([tag_hash(t) for t in encoded.dictionary.to_pylist()] + [0],
                         dtype=np.uint32)
    indices = _np(encoded.indices, len(encoded.dictionary))
    return per_value[indices]


def _entry_items(rows: pa.RecordBatch) -> list[tuple[int, pa.Array, pa.Array]]:
    topic = pc.binary_join_element_wise(rows.column("topic").cast(pa.binary()), _NUL, _EMPTY)
    qid, qoff = _np(rows.column("queue_id")), _np(rows.column("queue_offset"))
    offset, store_time = _np(rows.column("offset")), _np(rows.column("store_time"))
    is_ref = _np(pc.equal(rows.column("type"), "REF_MESSAGE"), False).astype(bool)
    data_offset = np.where(is_ref, _np(rows.column("ref_offset")), offset)
    data_size = np.where(is_ref, _np(rows.column("ref_size")), _np(rows.column("size")))
    cq_value = _packed(_CQ_VALUE, data_offset=data_offset, data_size=data_size,
                       tag_hash=_tag_hashes(rows.column("tags")), store_time=store_time,
                       source_offset=offset)
    sampled = qoff % K.TIME_EVERY == 0  # the sparse time index (keys.entry_items)
    out = [
        (K.DB_CQ, _join(topic, _packed(_QID_QOFF, qid=qid, qoff=qoff)), cq_value),
        (K.DB_TIME, _join(topic.filter(pa.array(sampled)),
                          _packed(_QID_TIME_QOFF, qid=qid[sampled], qoff=qoff[sampled],
                                  time=np.maximum(store_time[sampled], 0))),
         pa.repeat(_EMPTY, int(sampled.sum()))),
    ]
    keyed = rows.filter(pc.is_valid(rows.column("key")))
    if keyed.num_rows:
        source = _np(keyed.column("offset"))
        key_key = _join(pc.binary_join_element_wise(
            keyed.column("topic").cast(pa.binary()), keyed.column("key").cast(pa.binary()),
            _EMPTY, _NUL), _packed(_U64BE, v=source))
        out.append((K.DB_KEYS, key_key, _packed(_KEY_VALUE, qid=_np(keyed.column("queue_id")),
                                                  qoff=_np(keyed.column("queue_offset")))))
        out.append((K.DB_KEYOFF, _packed(_U64BE, v=source), key_key))
    return out


def _end_items(rows: pa.RecordBatch, latest: bool) -> list[tuple[int, pa.Array, pa.Array]]:
    offset = _np(rows.column("offset"))
    # The ``txends`` key: tx_id NUL producer group (fmq.index.keys.tx_end_key).
    tid = pc.binary_join_element_wise(
        rows.column("tx_id").cast(pa.binary()), rows.column("producer_group").cast(pa.binary()),
        _NUL, null_handling="replace", null_replacement="")
    out = []
    if latest:
        committed = _np(pc.equal(rows.column("type"), "COMMIT"), False).astype(np.uint8)
        out.append((K.DB_TXENDS, tid, _packed(_TX_END_VALUE, committed=committed,
                                               offset=offset)))
    out.append((K.DB_TXOFF, _packed(_U64BE, v=offset), tid))
    return out


def timer_batch_items(rows: pa.RecordBatch) -> pa.RecordBatch:
    """The ``timers`` and ``timeroff`` items of TIMER rows that are still pending (the
    caller dropped those a MESSAGE delivered or a TIMER relocated): :func:`fmq.index.keys.timer_items`."""
    offset = _np(rows.column("offset"))
    key = _packed(_TIMER_KEY, due=np.maximum(_np(rows.column("queue_offset")), 0),
                  offset=offset)
    value = _join(_packed(_TIMER_VALUE, size=_np(rows.column("size"))),
                  rows.column("topic").cast(pa.binary()))
    return _items([(K.DB_TIMERS, key, value),
                   (K.DB_TIMEROFF, _packed(_U64BE, v=offset), key)])


def timer_count_items(rows: pa.RecordBatch) -> pa.RecordBatch:
    """The ``timertopics`` items of rows (``topic``, ``count``): pending timers per topic."""
    counts = _packed(_I64, v=_np(rows.column("count")))
    return _items([(K.DB_TIMERTOPICS, rows.column("topic").cast(pa.binary()), counts)])


def _items(parts: list[tuple[int, pa.Array, pa.Array]]) -> pa.RecordBatch:
    if not parts:
        return pa.RecordBatch.from_pylist([], schema=ITEMS_ARROW)
    dbs = pa.concat_arrays([pa.array(np.full(len(k), db, dtype=np.int32)) for db, k, _v in parts])
    keys = pa.concat_arrays([k for _db, k, _v in parts])
    values = pa.concat_arrays([v for _db, _k, v in parts])
    return pa.RecordBatch.from_arrays([dbs, keys, values], schema=ITEMS_ARROW)


def batch_items(batch: pa.RecordBatch, latest_ends: bool) -> pa.RecordBatch:
    """(db, key, value) of every index item the rows of ``batch`` make. ``txends`` items
    only with ``latest_ends`` (the caller hands over only the last end of each id)."""
    rtype = batch.column("type")
    parts = []
    entries = batch.filter(pc.is_in(rtype, pa.array(INDEXED_TYPES)))
    if entries.num_rows:
        parts += _entry_items(entries)
    ends = batch.filter(pc.is_in(rtype, pa.array(END_TYPES)))
    if ends.num_rows:
        parts += _end_items(ends, latest_ends)
    return _items(parts)
