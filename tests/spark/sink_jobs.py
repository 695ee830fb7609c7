"""Spark jobs writing to ``fmq-topic`` in their own local session (a child process: the
test session's shared one allows no task retry and must not be stopped).

``python -m tests.spark.sink_jobs retry ADDRESS TOPIC ROWS``: a batch write of ``ROWS``
rows in 3 partitions on ``local[2,3]`` (three attempts per task) where attempt 0 of
partition 0 fails in the middle of its rows and attempt 0 of partition 1 fails after it
prepared its transaction (its commit message never reaches the driver, as when an executor
is lost).

``python -m tests.spark.sink_jobs stream ADDRESS SOURCE DEST CHECKPOINT [FAIL_AFTER]``: the
pipeline of docs/spark.md: read ``SOURCE`` as a stream, upper-case the bodies, write them
to ``DEST`` exactly once, ``availableNow``, 50 messages per micro-batch. With
``FAIL_AFTER`` the sink's driver commit of that batch raises after it committed, before
Spark's commit log records the batch (as a driver killed there): the process exits 3 and
a restart runs the batch again.
"""

from __future__ import annotations

import os
import sys

from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from fmq.spark.topic_sink import TopicBatchWriter, TopicStreamWriter
from fmq.spark.topic_source import TopicDataSource


class AttemptZeroLost(RuntimeError):
    """The injected failure of a first task attempt."""


class DriverDiedAfterCommit(RuntimeError):
    """The injected failure of the driver right after the sink's commit."""


class LosingBatchWriter(TopicBatchWriter):
    def write(self, iterator):
        message = super().write(iterator)
        ctx = TaskContext.get()
        if ctx.partitionId() == 1 and ctx.attemptNumber() == 0:
            raise AttemptZeroLost("attempt 0 of partition 1 is lost after its prepare")
        return message


class DyingStreamWriter(TopicStreamWriter):
    def commit(self, messages, batchId):  # noqa: N803
        super().commit(messages, batchId)
        if batchId == int(os.environ.get("FMQ_SINK_FAIL_AFTER", "-1")):
            raise DriverDiedAfterCommit(f"the driver dies after the commit of {batchId}")


class TestSinkSource(TopicDataSource):
    @classmethod
    def name(cls) -> str:
        return "fmq-topic-test"

    def writer(self, schema, overwrite):
        return LosingBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema, overwrite):
        return DyingStreamWriter(dict(self.options), schema)


def _session(master: str) -> SparkSession:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (SparkSession.builder.master(master).appName("fmq-topic-sink")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "512m")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(TopicDataSource)
    spark.dataSource.register(TestSinkSource)
    return spark


def _fail_mid_partition_0(i: int) -> int:
    ctx = TaskContext.get()
    if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and i % 3 == 0 and i > 30:
        raise AttemptZeroLost("attempt 0 of partition 0 fails in the middle of its rows")
    return i


def retry(address: str, topic: str, rows: int) -> None:
    spark = _session("local[2,3]")
    guard = F.udf(_fail_mid_partition_0, "int")
    df = (spark.range(rows, numPartitions=3).select(guard(F.col("id").cast("int")).alias("i"))
          .select(F.format_string("r-%d", "i").alias("body"),
                  F.format_string("k%d", F.col("i") % 5).alias("key")))
    (df.write.format("fmq-topic-test").option("servers", address).option("topic", topic)
     .mode("append").save())
    spark.stop()


def stream(address: str, source: str, dest: str, checkpoint: str) -> None:
    spark = _session("local[2]")
    # The pipeline of docs/spark.md ("An exactly-once pipeline"), with the test's writer.
    upper = (spark.readStream.format("fmq-topic").option("servers", address)
             .option("subscribe", source).option("startingOffsets", "earliest")
             .option("maxMessagesPerTrigger", "50").load()
             .select("key", F.upper(F.col("body").cast("string")).alias("body"),
                     F.map_from_arrays(F.array(F.lit("from")),
                                       F.array(F.format_string("%s/%d/%d", "topic", "queue_id",
                                                               "queue_offset")))
                     .alias("properties")))
    query = (upper.writeStream.format("fmq-topic-test").option("servers", address)
             .option("topic", dest).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination()
    except Exception as exc:  # noqa: BLE001 - the injected failure ends the process
        print(f"query failed: {exc}"[:2000], flush=True)
        spark.stop()
        raise SystemExit(3) from None
    spark.stop()


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "retry":
        retry(args[0], args[1], int(args[2]))
    else:
        stream(*args)
