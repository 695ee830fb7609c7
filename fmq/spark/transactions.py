"""The transaction table of the log in Spark SQL: one row per transaction (producer group
and id) with the state recovery would give it, and the open ones the rebuilt checkpoint must cover."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from fmq.spark.derive import END_TYPES

#: The record types that carry a transaction id (the table reads only these).
TX_TYPES = ("PREPARE", "PRE_MESSAGE", "REF_MESSAGE", "TX_MESSAGE", "COMMIT", "ROLLBACK")
#: States of a transaction the broker still has to finish when it opens.
OPEN_STATES = ("open", "committing", "incomplete")


def transaction_table(valid: DataFrame) -> DataFrame:
    """One row per transaction (group and id), with redo's semantics (fmq/recovery/recover.py): the
    latest PREPARE opens it; the first COMMIT/ROLLBACK after that ends it; PRE_MESSAGEs
    after it are its messages; a REF/TX after it without an end makes it "committing"
    (the broker rolls it forward on open); fewer PRE_MESSAGEs than the PREPARE announced
    (its ``ref_size``) and no end make it "incomplete" (the broker rolls it back on open),
    unless that PREPARE is a relocation (``ref_offset`` set): a cut relocation leaves the
    original whole, so the transaction is "open" (its message count is then the copy's).
    A transaction whose PREPARE retention deleted is never open ("commit"/"rollback" when
    its end is still in the log, else "unknown").
    A REF/TX record of a log written before they named their group belongs to the one
    group of its id (ids were unique across groups then).
    One shuffle: the windows and the grouping share the partitioning by tx_id.
    """
    is_prepare = F.col("type") == "PREPARE"
    ends = F.col("type").isin(*END_TYPES)
    one = Window.partitionBy("tx_id", "producer_group")
    tx = (valid.where(F.col("tx_id").isNotNull())
          .select("offset", "type", "tx_id", "producer_group", "store_time", "ref_size",
                  "ref_offset")
          .withColumn("producer_group", F.coalesce(
              F.col("producer_group"),
              F.max("producer_group").over(Window.partitionBy("tx_id"))))
          .withColumn("prepare_offset", F.max(F.when(is_prepare, F.col("offset"))).over(one))
          .withColumn("first_prepare", F.min(F.when(is_prepare, F.col("offset"))).over(one)))
    after = F.col("prepare_offset").isNull() | (F.col("offset") >= F.col("prepare_offset"))
    table = tx.where(after).groupBy("tx_id", "producer_group").agg(
        F.max("prepare_offset").alias("prepare_offset"),
        F.max_by("store_time", F.when(is_prepare, F.col("offset"))).alias("prepare_time"),
        F.max_by("ref_size", F.when(is_prepare, F.col("offset"))).alias("expected"),
        F.max_by("ref_offset", F.when(is_prepare, F.col("offset"))).alias("relocated_from"),
        F.min("first_prepare").alias("first_prepare_offset"),
        F.count(F.when(F.col("type") == "PRE_MESSAGE", 1)).alias("messages"),
        F.count(F.when(F.col("type").isin("REF_MESSAGE", "TX_MESSAGE"), 1)).alias("copies"),
        F.min_by(F.when(ends, F.col("type")), F.when(ends, F.col("offset"))).alias("end"),
        F.min(F.when(ends, F.col("offset"))).alias("end_offset"),
    )
    state = (F.when(F.col("end") == "COMMIT", "commit")
             .when(F.col("end") == "ROLLBACK", "rollback")
             .when(F.col("prepare_offset").isNull(), "unknown")
             .when(F.col("copies") > 0, "committing")
             .when((F.coalesce(F.col("expected"), F.lit(0)) > F.col("messages"))
                   & F.col("relocated_from").isNull(), "incomplete")
             .otherwise("open"))
    return table.select(
        "tx_id", "producer_group", "prepare_offset", "first_prepare_offset", "prepare_time",
        F.col("messages").cast("long").alias("messages"),
        F.col("copies").cast("long").alias("copies"),
        "end_offset", state.alias("state"))


def open_transactions(txs: DataFrame) -> list[dict]:
    """The open transactions of the table ``txs``, oldest PREPARE first, as the job
    reports them."""
    # Sorted here, not by Spark: a global sort would cost a sampling job for a few rows.
    rows = sorted(txs.where(F.col("state").isin(*OPEN_STATES)).collect(),
                  key=lambda r: (r["prepare_offset"] is None, r["prepare_offset"] or 0))
    return [
        {"tx_id": r["tx_id"], "producer_group": r["producer_group"], "state": r["state"],
         "messages": r["messages"], "prepare_offset": r["prepare_offset"],
         "first_prepare_offset": r["first_prepare_offset"], "store_time": r["prepare_time"]}
        for r in rows
    ]
