"""The Parquet audit of a log (``--parquet DIR``): the record table, per-queue and
per-topic summaries and the transaction table, for offline queries with Spark SQL
(``docs/spark.md`` has example queries)."""

from __future__ import annotations

import os

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fmq.spark.derive import INDEXED_TYPES
from fmq.spark.session import file_uri


def write_audit(raw: DataFrame, txs: DataFrame, parquet_dir: str) -> dict:
    """``records/`` (every row of the data source, without bodies), ``summary/`` (one row
    per topic and queue), ``topics/`` (one row per topic) and ``transactions/`` as Parquet
    under ``parquet_dir``."""
    out = os.path.abspath(parquet_dir)
    valid = raw.where(F.col("damage").isNull())
    raw.write.mode("overwrite").parquet(file_uri(os.path.join(out, "records")))
    txs.write.mode("overwrite").parquet(file_uri(os.path.join(out, "transactions")))

    # A REF_MESSAGE carries no body: its bytes are its PRE_MESSAGE's body.
    pre = valid.where(F.col("type") == "PRE_MESSAGE").select(
        F.col("offset").alias("ref_offset"), F.col("body_size").alias("pre_body_size"))
    msgs = (valid.where(F.col("type").isin(*INDEXED_TYPES)).join(pre, "ref_offset", "left")
            .withColumn("bytes", F.when(F.col("type") == "REF_MESSAGE", F.col("pre_body_size"))
                        .otherwise(F.col("body_size"))))
    per_queue = msgs.groupBy("topic", "queue_id").agg(
        F.count(F.lit(1)).alias("messages"),
        F.sum(F.when(F.col("type") == "MESSAGE", 1).otherwise(0)).alias("plain_messages"),
        F.sum(F.when(F.col("type") != "MESSAGE", 1).otherwise(0)).alias("transactional_messages"),
        F.sum("bytes").alias("bytes"),
        F.min("store_time").alias("first_store_time"),
        F.max("store_time").alias("last_store_time"),
        F.min("queue_offset").alias("min_queue_offset"),
        (F.max("queue_offset") + 1).alias("next_queue_offset"),
    )
    # Transactions touching a queue: those with a PRE_MESSAGE in it.
    tq = (valid.where(F.col("type") == "PRE_MESSAGE")
          .select("topic", "queue_id", "tx_id", "producer_group").distinct()
          .join(txs.select("tx_id", "producer_group", "state"), ["tx_id", "producer_group"]))
    tx_counts = tq.groupBy("topic", "queue_id").agg(
        F.sum(F.when(F.col("state") == "commit", 1).otherwise(0)).alias("committed_transactions"),
        F.sum(F.when(F.col("state") == "rollback", 1).otherwise(0))
        .alias("rolled_back_transactions"),
        F.sum(F.when(F.col("state").isin("open", "committing"), 1).otherwise(0))
        .alias("open_transactions"),
    )
    summary = per_queue.join(tx_counts, ["topic", "queue_id"], "full_outer")
    zero = ["messages", "plain_messages", "transactional_messages", "bytes",
            "committed_transactions", "rolled_back_transactions", "open_transactions"]
    summary = summary.select(
        "topic", "queue_id",
        *[F.coalesce(F.col(c), F.lit(0)).cast("long").alias(c) for c in zero],
        "first_store_time", "last_store_time", "min_queue_offset", "next_queue_offset",
    ).orderBy("topic", "queue_id")
    summary.write.mode("overwrite").parquet(file_uri(os.path.join(out, "summary")))
    # Per topic, from the per-queue table just written (a small read, no second pass over
    # the log). A transaction with messages in two queues of a topic counts in each.
    queues = summary.sparkSession.read.parquet(file_uri(os.path.join(out, "summary")))
    topics = queues.groupBy("topic").agg(
        F.count(F.lit(1)).alias("queues"),
        *[F.sum(c).cast("long").alias(c) for c in zero],
        F.min("first_store_time").alias("first_store_time"),
        F.max("last_store_time").alias("last_store_time"),
    ).orderBy("topic")
    topics.write.mode("overwrite").parquet(file_uri(os.path.join(out, "topics")))
    return {name: os.path.join(out, name)
            for name in ("records", "summary", "topics", "transactions")}
