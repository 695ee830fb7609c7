"""What the topic source's batch and streaming readers share: the columns, the input
partition (one queue range) and the executor-side read of one range into Arrow batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from fmq.message import StoredMessage
from fmq.spark.topic_client import QueueClient
from fmq.spark.topic_offsets import Offsets

#: (name, Spark DDL type, Arrow type), in column order.
TOPIC_COLUMNS: list[tuple[str, str, pa.DataType]] = [
    ("topic", "string", pa.string()),
    ("queue_id", "int", pa.int32()),
    ("queue_offset", "bigint", pa.int64()),
    ("offset", "bigint", pa.int64()),  # the message's log offset
    ("key", "string", pa.string()),
    ("tags", "string", pa.string()),
    ("properties", "map<string,string>", pa.map_(pa.string(), pa.string())),
    ("store_time", "bigint", pa.int64()),  # ms since the epoch
    ("body", "binary", pa.binary()),
]
TOPIC_SCHEMA = pa.schema([(n, a) for n, _d, a in TOPIC_COLUMNS])


def topic_schema_ddl() -> str:
    """The DataFrame schema as a Spark DDL string."""
    return ", ".join(f"`{n}` {ddl}" for n, ddl, _a in TOPIC_COLUMNS)


class QueueRange(InputPartition):
    """Queue offsets ``start`` .. ``end - 1`` of one queue: one Spark task."""

    def __init__(self, index: int, topic: str, queue_id: int, start: int, end: int) -> None:
        super().__init__(index)
        self.topic = topic
        self.queue_id = queue_id
        self.start = start
        self.end = end


def plan(start: Offsets, end: Offsets) -> list[QueueRange]:
    """One partition per queue with messages between ``start`` and ``end`` (a queue
    missing from ``start`` starts at 0, its earliest)."""
    ranges = []
    for topic in sorted(end):
        for qid in sorted(end[topic], key=int):
            lo = start.get(topic, {}).get(qid, 0)
            hi = end[topic][qid]
            if hi > lo:
                ranges.append(QueueRange(len(ranges), topic, int(qid), lo, hi))
    return ranges


def to_arrow(msgs: list[StoredMessage]) -> pa.RecordBatch:
    columns = [
        [m.topic for m in msgs],
        [m.queue_id for m in msgs],
        [m.queue_offset for m in msgs],
        [m.offset for m in msgs],
        [m.key for m in msgs],
        [m.tags for m in msgs],
        [list(m.properties.items()) for m in msgs],
        [m.store_time for m in msgs],
        [bytes(m.body) for m in msgs],
    ]
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=t) for c, (_n, _d, t) in zip(columns, TOPIC_COLUMNS, strict=True)],
        schema=TOPIC_SCHEMA)


def read_range(servers: str | Sequence[str], part: QueueRange,
               access: dict[str, Any] | None = None) -> Iterator[pa.RecordBatch]:
    """The messages of one partition, read from the server (runs in a Spark task);
    ``access``: the client's TLS and log-in options."""
    with QueueClient(servers, **(access or {})) as client:
        for msgs in client.read_range(part.topic, part.queue_id, part.start, part.end):
            yield to_arrow(msgs)
