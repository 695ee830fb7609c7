"""``spark.readStream.format("fmq-topic")``: the streaming reader (Spark's Python
``DataSourceStreamReader`` with admission control, Spark 4.2 or later).

Spark keeps the offsets (:mod:`fmq.spark.topic_offsets`) in the query's checkpoint: it
writes a micro-batch's end offsets before running it and runs an unfinished batch again
with the same offsets after a restart. A queue range always reads the same messages
(queue offsets are never reused and only consumable messages have one), so a sink that
commits per batch, such as the file sink, holds every message exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from fmq.spark.topic_groups import GroupClients
from fmq.spark.topic_offsets import (
    Offsets,
    Ranges,
    access_options,
    cap,
    consistent_ranges,
    parse_start,
    parse_topics,
    positive_int,
    required,
    resolve,
)
from fmq.spark.topic_read import QueueRange, plan, read_range


def _ends(ranges: Ranges, topics: list[str]) -> Offsets:
    out: Offsets = {t: {} for t in topics}
    for (t, q), (_lo, hi) in ranges.items():
        out[t][q] = hi
    return out


class TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches on the driver; :meth:`read` runs in the executors."""

    def __init__(self, options: dict) -> None:
        self.servers = required(options, "servers", "127.0.0.1:7070")
        self.access = access_options(options)  # TLS and the log-in, for every task too
        self.topics = parse_topics(options)
        self.start = parse_start(options, self.topics, "latest")
        self.max_messages = positive_int(options, "maxMessagesPerTrigger")
        self._client: GroupClients | None = None
        self._target: Offsets | None = None  # Trigger.AvailableNow: read up to here
        self._latest_seen: Offsets | None = None  # for Spark's progress report

    @property
    def client(self) -> GroupClients:
        if self._client is None:
            self._client = GroupClients(self.servers, **self.access)
        return self._client

    def initialOffset(self) -> dict:
        ranges = consistent_ranges(self.client, self.topics)
        return resolve(self.client, self.topics, self.start, ranges)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_messages is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.max_messages)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def _latest(self) -> Offsets:
        self._latest_seen = _ends(consistent_ranges(self.client, self.topics), self.topics)
        return self._latest_seen

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = self._target if self._target is not None else self._latest()
        # Never behind start: a queue the server cut (its data replaced) waits instead of
        # going back, which Spark would refuse. A queue the route no longer has (its group
        # removed from the topic) keeps its position; a new one (an expansion) starts at 0.
        end = {t: {**start.get(t, {}),
                   **{q: max(off, start.get(t, {}).get(q, 0)) for q, off in qs.items()}}
               for t, qs in latest.items()}
        if isinstance(limit, ReadMaxRows):
            end = cap(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> dict | None:
        # What the last planning read; reading the server again here would double the
        # requests of every trigger for a number in the progress report.
        return self._latest_seen

    def partitions(self, start: dict, end: dict) -> list[QueueRange]:
        return plan(start, end)

    def read(self, partition: QueueRange) -> Iterator[pa.RecordBatch]:
        return read_range(self.servers, partition, self.access)

    def commit(self, end: dict) -> None:
        # Positions live in Spark's checkpoint only: nothing to tell the server.
        return None

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
