"""A streaming query from ``format("fmq-topic")`` into a Parquet file sink, in its own
local Spark session, with a 200 ms processing-time trigger, until the parent SIGKILLs it.

``python -m tests.workloads.topic_stream_query ADDRESS TOPICS CHECKPOINT SINK``
(``TOPICS`` comma-separated). Each finished micro-batch prints ``batch <id> <rows>`` on
stdout.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from fmq.spark.topic_source import register


def main(argv: list[str]) -> None:
    address, topics, checkpoint, sink = argv
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (SparkSession.builder.master("local[2]").appName("fmq-topic-query")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "512m")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    stream = (spark.readStream.format("fmq-topic").option("servers", address)
              .option("subscribe", topics).option("startingOffsets", "earliest")
              .option("maxMessagesPerTrigger", "200").load())
    query = (stream.writeStream.format("parquet").option("path", sink)
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime="200 milliseconds").start())
    seen = -1
    while query.isActive:
        query.awaitTermination(0.2)
        progress = query.lastProgress
        if progress is not None and progress["batchId"] != seen:
            seen = progress["batchId"]
            print(f"batch {seen} {progress['numInputRows']}", flush=True)
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
