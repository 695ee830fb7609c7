"""The rows of ``spark.read.format("fmq")``: the columns, the Spark schema, and Arrow
batches built row by row from decoded records and damage (damage rows, and the fallback
when a chunk's text does not decode; :mod:`fmq.spark.batches` builds the usual batches
column-wise).

The record columns are exactly the keys of :meth:`fmq.log.record.Record.to_dict` (the
columns and values of ``fmq log dump --json``).
"""

from __future__ import annotations

import pyarrow as pa

from fmq.log.reader import Damage
from fmq.log.record import NONE, Record, RecordType

PROPERTIES_ARROW = pa.map_(pa.string(), pa.string())
DAMAGE_ARROW = pa.struct([("kind", pa.string()), ("reason", pa.string())])

#: Columns of every row, in order: (name, Spark DDL type, Arrow type). The record columns
#: are exactly the keys of ``Record.to_dict()`` (``fmq log dump --json``).
RECORD_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("offset", "bigint", pa.int64()),
    ("size", "bigint", pa.int64()),
    ("type", "string", pa.string()),
    ("store_time", "bigint", pa.int64()),
    ("topic", "string", pa.string()),
    ("queue_id", "int", pa.int32()),
    ("queue_offset", "bigint", pa.int64()),
    ("tx_id", "string", pa.string()),
    ("producer_group", "string", pa.string()),
    ("ref_offset", "bigint", pa.int64()),
    ("ref_size", "bigint", pa.int64()),
    ("key", "string", pa.string()),
    ("tags", "string", pa.string()),
    ("properties", "map<string,string>", PROPERTIES_ARROW),
    ("body_size", "bigint", pa.int64()),
]
#: ``store_time`` as Spark's TimestampType (the topic source's ``store_time``, Kafka's
#: ``timestamp``); ``store_time`` itself stays the ms that ``fmq log dump --json`` prints.
TIMESTAMP_ARROW = pa.timestamp("us", tz="UTC")
EXTRA_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("segment", "string", pa.string()),
    ("damage", "struct<kind:string,reason:string>", DAMAGE_ARROW),
    ("store_timestamp", "timestamp", TIMESTAMP_ARROW),
]
#: The store times (ms) a timestamp is given for: Spark's range, years 1 to 9999. Outside
#: it (only a hand-made or damaged record holds such a time) ``store_timestamp`` is null.
TIMESTAMP_MIN_MS = -62_135_596_800_000
TIMESTAMP_MAX_MS = 253_402_300_799_999


def timestamp_micros(store_time: int) -> int | None:
    """``store_timestamp`` of a record stored at ``store_time`` ms: microseconds since the
    epoch, or None outside years 1 to 9999."""
    if TIMESTAMP_MIN_MS <= store_time <= TIMESTAMP_MAX_MS:
        return store_time * 1000
    return None
BODY_COLUMN: tuple[str, str, pa.DataType] = ("body", "binary", pa.binary())
RECORD_FIELDS = [name for name, _ddl, _arrow in RECORD_COLUMNS]
_TYPE_NAMES = {int(t): t.name for t in RecordType}

#: Rows per Arrow batch handed to Spark: big enough to amortise the conversion, small
#: enough that a batch of 4 MiB bodies stays within an executor's memory.
BATCH_ROWS = 4096
BATCH_BODY_BYTES = 64 << 20


def columns(with_body: bool) -> list[tuple[str, str, pa.DataType]]:
    return RECORD_COLUMNS + EXTRA_COLUMNS + ([BODY_COLUMN] if with_body else [])


def arrow_schema(with_body: bool) -> pa.Schema:
    """The Arrow schema of the batches the source yields (Spark checks it exactly)."""
    return pa.schema([(n, a) for n, _d, a in columns(with_body)])


def schema_ddl(with_body: bool = False) -> str:
    """The DataFrame schema as a Spark DDL string."""
    return ", ".join(f"`{n}` {ddl}" for n, ddl, _a in columns(with_body))


class RowBatch:
    """Column lists of the rows of one Arrow batch."""

    def __init__(self, cols: list[tuple[str, str, pa.DataType]]) -> None:
        self.cols = cols
        self.names = [n for n, _d, _a in cols]
        self.data: dict[str, list] = {n: [] for n in self.names}
        self.rows = 0
        self.body_bytes = 0

    def add_record(self, rec: Record, segment: str, with_body: bool) -> None:
        # Field by field what Record.to_dict() gives (the values of `fmq log dump --json`;
        # tests/spark compares the two), without building a dict per record: this loop is
        # most of the data source's CPU time.
        data = self.data
        data["offset"].append(rec.log_offset)
        data["size"].append(rec.size)
        data["type"].append(_TYPE_NAMES[rec.type])
        data["store_time"].append(rec.store_time)
        data["topic"].append(rec.topic or None)
        data["queue_id"].append(None if rec.queue_id == NONE else rec.queue_id)
        data["queue_offset"].append(None if rec.queue_offset == NONE else rec.queue_offset)
        data["tx_id"].append(rec.tx_id or None)
        data["producer_group"].append(rec.producer_group or None)
        data["ref_offset"].append(None if rec.ref_offset == NONE else rec.ref_offset)
        data["ref_size"].append(rec.ref_size or None)
        data["key"].append(rec.key)
        data["tags"].append(rec.tags)
        data["properties"].append(rec.properties or {})
        data["body_size"].append(len(rec.body))
        data["segment"].append(segment)
        data["damage"].append(None)
        data["store_timestamp"].append(timestamp_micros(rec.store_time))
        if with_body:
            body = bytes(rec.body)
            data["body"].append(body)
            self.body_bytes += len(body)
        self.rows += 1

    def add_damage(self, damage: Damage, with_body: bool) -> None:
        data = self.data
        for name in RECORD_FIELDS:
            data[name].append(None)
        data["offset"][-1] = damage.offset
        data["segment"].append(damage.segment)
        data["damage"].append({"kind": damage.kind.value, "reason": damage.reason})
        data["store_timestamp"].append(None)
        if with_body:
            data["body"].append(None)
        self.rows += 1

    def full(self) -> bool:
        return self.rows >= BATCH_ROWS or self.body_bytes >= BATCH_BODY_BYTES

    def flush(self) -> pa.RecordBatch:
        # Spark rejects a batch whose Arrow types differ from the declared schema in any
        # way (int32 vs int64), so every array gets its type explicitly.
        arrays = [pa.array(self.data[n], type=t) for n, _d, t in self.cols]
        batch = pa.RecordBatch.from_arrays(arrays, names=self.names)
        self.data = {n: [] for n in self.names}
        self.rows = 0
        self.body_bytes = 0
        return batch


