"""``spark.read.format("fmq-topic")`` and ``spark.readStream.format("fmq-topic")``: the
consumable messages of one or more topics of a running ``fmq server``, read through the
Python client (Kafka's Spark connector is the model).

Usage::

    from fmq.spark.topic_source import register
    register(spark)                      # once per SparkSession
    df = (spark.read.format("fmq-topic").option("servers", "127.0.0.1:7070")
          .option("subscribe", "orders,payments").load())
    stream = (spark.readStream.format("fmq-topic").option("servers", "127.0.0.1:7070")
              .option("subscribe", "orders").option("startingOffsets", "earliest")
              .option("maxMessagesPerTrigger", "10000").load())

Only consumable messages are read: plain messages, and a transaction's messages once it
is committed (never an open or rolled-back one's). One Spark partition per queue range;
a topic routed over several broker groups (docs/cluster.md) has one per (group, queue),
read from that group's primary. Columns: :data:`fmq.spark.topic_read.TOPIC_COLUMNS`.

Options (``docs/spark.md``, *Topics as a Spark source*, has the details):

``servers``           ``host:port[,host:port]`` of the server (required).
``subscribe``         topics, comma-separated (required).
``startingOffsets``   ``earliest`` (batch default), ``latest`` (streaming default), or
                      per queue as JSON ``{"orders": {"0": 12, "1": -2}}`` (-2 earliest,
                      -1 latest; queues not named start at earliest; ``"g2/0"`` names
                      queue 0 of broker group g2 of a routed topic).
``startingTimestamp`` ms since the epoch: each queue starts at its first message stored
                      then or later (instead of ``startingOffsets``).
``endingOffsets``     batch only: ``latest`` (default) or per-queue JSON (-1 latest;
                      queues not named end at latest).
``maxMessagesPerTrigger``  streaming only: at most this many messages per micro-batch.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader
from pyspark.sql.types import StructType

from fmq.errors import InvalidArgument
from fmq.spark.topic_groups import GroupClients
from fmq.spark.topic_offsets import (
    LATEST,
    access_options,
    consistent_ranges,
    option,
    parse_position,
    parse_start,
    parse_topics,
    required,
    resolve,
)
from fmq.spark.topic_read import QueueRange, plan, read_range, topic_schema_ddl
from fmq.spark.topic_sink import TopicBatchWriter, TopicStreamWriter
from fmq.spark.topic_stream import TopicStreamReader


class TopicBatchReader(DataSourceReader):
    """Reads the offsets once, when Spark plans the scan; each task reads one range."""

    def __init__(self, options: dict) -> None:
        self.servers = required(options, "servers", "127.0.0.1:7070")
        self.access = access_options(options)  # TLS and the log-in, for every task too
        topics = parse_topics(options)
        start = parse_start(options, topics, "earliest")
        end = parse_position(option(options, "endingOffsets") or "latest", "endingOffsets",
                             topics, ("latest",), LATEST)
        if option(options, "maxMessagesPerTrigger") is not None:
            raise InvalidArgument("maxMessagesPerTrigger is a streaming option: use it with "
                                  "spark.readStream, or give endingOffsets to a batch read")
        with GroupClients(self.servers, **self.access) as clients:
            ranges = consistent_ranges(clients, topics)
            self.start = resolve(clients, topics, start, ranges)
            self.end = resolve(clients, topics, end, ranges)
        for t, qs in self.end.items():
            for q, off in qs.items():
                if off < self.start[t][q]:
                    raise InvalidArgument(
                        f"endingOffsets {off} of queue {q} of topic {t!r} is before its "
                        f"starting offset {self.start[t][q]}: give an end at or after the start")

    def partitions(self) -> list[QueueRange]:
        return plan(self.start, self.end)

    def read(self, partition: QueueRange) -> Iterator[pa.RecordBatch]:
        return read_range(self.servers, partition, self.access)


class TopicDataSource(DataSource):
    """``format("fmq-topic")``; see the module docstring for options."""

    @classmethod
    def name(cls) -> str:
        return "fmq-topic"

    def schema(self) -> str:
        return topic_schema_ddl()

    def reader(self, schema: StructType) -> TopicBatchReader:
        return TopicBatchReader(dict(self.options))

    def streamReader(self, schema: StructType) -> TopicStreamReader:
        return TopicStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> TopicBatchWriter:
        _append_only(overwrite)
        return TopicBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TopicStreamWriter:
        _append_only(overwrite)
        return TopicStreamWriter(dict(self.options), schema)


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise InvalidArgument('a topic cannot be overwritten: write to fmq-topic with '
                              'mode("append") (its messages are only ever added)')


def register(spark) -> None:
    """Make ``format("fmq-topic")`` available in ``spark`` (once per session)."""
    spark.dataSource.register(TopicDataSource)
