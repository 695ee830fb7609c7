"""What the topic source's batch and streaming readers share: the columns, the input
partition (one queue range, of one broker group for a topic routed over several) and the
executor-side read of one range into Arrow batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from fmq.errors import FMQError
from fmq.message import StoredMessage
from fmq.spark.errors import GroupUnreachable
from fmq.spark.topic_groups import SINGLE, queue_key, reading_client, split_key
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
    # When the broker stored the message, as Kafka's source gives ``timestamp``.
    ("store_time", "timestamp", pa.timestamp("us", tz="UTC")),
    ("body", "binary", pa.binary()),
    # The broker group holding the queue (queue_id is its local id there); null for a
    # topic outside a cluster. Last, so the columns before it keep their places.
    ("group", "string", pa.string()),
    # store_time as the broker keeps it (ms since the epoch): what startingTimestamp
    # and the client's offset_for_time take.
    ("store_time_ms", "bigint", pa.int64()),
]
TOPIC_SCHEMA = pa.schema([(n, a) for n, _d, a in TOPIC_COLUMNS])


def topic_schema_ddl() -> str:
    """The DataFrame schema as a Spark DDL string."""
    return ", ".join(f"`{n}` {ddl}" for n, ddl, _a in TOPIC_COLUMNS)


class QueueRange(InputPartition):
    """Queue offsets ``start`` .. ``end - 1`` of one queue (of broker group ``group``, or
    :data:`~fmq.spark.topic_groups.SINGLE`): one Spark task."""

    def __init__(self, index: int, topic: str, queue_id: int, start: int, end: int,
                 group: str = SINGLE) -> None:
        super().__init__(index)
        self.topic = topic
        self.queue_id = queue_id
        self.start = start
        self.end = end
        self.group = group

    @property
    def key(self) -> str:
        """The queue's key in the offsets JSON."""
        return queue_key(self.group, self.queue_id)


def plan(start: Offsets, end: Offsets) -> list[QueueRange]:
    """One partition per queue with messages between ``start`` and ``end`` (a queue
    missing from ``start``, such as a queue a route expansion added, starts at 0, its
    earliest)."""
    ranges = []
    for topic in sorted(end):
        for key in sorted(end[topic], key=split_key):
            lo = start.get(topic, {}).get(key, 0)
            hi = end[topic][key]
            if hi > lo:
                group, qid = split_key(key)
                ranges.append(QueueRange(len(ranges), topic, qid, lo, hi, group))
    return ranges


def to_arrow(msgs: list[StoredMessage], group: str = SINGLE) -> pa.RecordBatch:
    columns = [
        [m.topic for m in msgs],
        [m.queue_id for m in msgs],
        [m.queue_offset for m in msgs],
        [m.offset for m in msgs],
        [m.key for m in msgs],
        [m.tags for m in msgs],
        [list(m.properties.items()) for m in msgs],
        [m.store_time * 1000 for m in msgs],
        [bytes(m.body) for m in msgs],
        [group or None] * len(msgs),
        [m.store_time for m in msgs],
    ]
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=t) for c, (_n, _d, t) in zip(columns, TOPIC_COLUMNS, strict=True)],
        schema=TOPIC_SCHEMA)


def read_range(servers: str | Sequence[str], part: QueueRange,
               access: dict[str, Any] | None = None) -> Iterator[pa.RecordBatch]:
    """The messages of one partition, read from the server (runs in a Spark task): the
    servers given, or in a cluster the primary of the partition's group, asked anew (a
    retried task finds a group's new primary); ``access``: the client's TLS and log-in
    options."""
    try:
        with reading_client(servers, part.topic, part.group, access or {}) as client:
            for msgs in client.read_range(part.topic, part.queue_id, part.start, part.end):
                yield to_arrow(msgs, part.group)
    except FMQError as exc:
        if part.group == SINGLE or not exc.retriable or isinstance(exc, GroupUnreachable):
            raise
        raise GroupUnreachable(part.group, part.topic, str(exc)) from exc
