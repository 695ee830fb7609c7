"""Filters pushed into spark.read.format("fmq") give the same rows as Spark filtering the
whole log, and an offset range skips whole segments."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from fmq.log.reader import list_segments

from .damage import log_dir


def _all_rows(spark, path: str) -> list[dict]:
    df = spark.read.format("fmq").option("mode", "permissive").option("body", "true").load(path)
    return [r.asDict(recursive=True) for r in df.collect()]


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["offset"], r["damage"] is None))


@pytest.fixture(scope="module")
def everything(spark, built_log) -> list[dict]:
    return _all_rows(spark, built_log.path)


def _between(everything: list[dict], column: str, q: float) -> int:
    values = sorted(r[column] for r in everything if r[column] is not None)
    return values[int(len(values) * q)]


CASES = {
    "type_equal": (lambda e: F.col("type") == "REF_MESSAGE",
                   lambda e, r: r["type"] == "REF_MESSAGE"),
    "type_in": (lambda e: F.col("type").isin("COMMIT", "ROLLBACK", "PREPARE"),
                lambda e, r: r["type"] in ("COMMIT", "ROLLBACK", "PREPARE")),
    "topic_equal": (lambda e: F.col("topic") == "payments",
                    lambda e, r: r["topic"] == "payments"),
    "topic_in": (lambda e: F.col("topic").isin("audit", "orders"),
                 lambda e, r: r["topic"] in ("audit", "orders")),
    "offset_range": (
        lambda e: (F.col("offset") >= _between(e, "offset", 0.4))
        & (F.col("offset") < _between(e, "offset", 0.7)),
        lambda e, r: _between(e, "offset", 0.4) <= r["offset"] < _between(e, "offset", 0.7)),
    "offset_equal": (lambda e: F.col("offset") == _between(e, "offset", 0.5),
                     lambda e, r: r["offset"] == _between(e, "offset", 0.5)),
    "store_time_range": (
        lambda e: (F.col("store_time") > _between(e, "store_time", 0.3))
        & (F.col("store_time") <= _between(e, "store_time", 0.8)),
        lambda e, r: r["store_time"] is not None
        and _between(e, "store_time", 0.3) < r["store_time"] <= _between(e, "store_time", 0.8)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pushed_filter_gives_the_rows_spark_filtering_gives(spark, built_log, everything, case):
    spark_filter, python_filter = CASES[case]
    df = (spark.read.format("fmq").option("mode", "permissive").option("body", "true")
          .option("pushdown", "true").load(built_log.path).where(spark_filter(everything)))
    got = [r.asDict(recursive=True) for r in df.collect()]
    expected = [r for r in everything if python_filter(everything, r)]
    assert expected, "the filter selects nothing: the case proves nothing"
    assert len(expected) < len(everything)
    assert _sorted(got) == _sorted(expected)


def test_offset_range_reads_only_the_segments_it_covers(spark, built_log):
    bases = list_segments(log_dir(built_log.path))
    assert len(bases) >= 4
    df = (spark.read.format("fmq").option("mode", "permissive").option("pushdown", "true")
          .load(built_log.path)
          .where((F.col("offset") >= bases[1]) & (F.col("offset") < bases[2])))
    assert df.rdd.getNumPartitions() == 1
    segments = {r["segment"] for r in df.select("segment").distinct().collect()}
    assert segments == {f"{bases[1]:020d}.seg"}


def test_the_source_takes_the_filters_it_documents_and_hands_back_the_rest(built_log):
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNull, LessThan

    from fmq.spark.source import FilteringFmqReader

    reader = FilteringFmqReader(built_log.path, {})
    taken = [EqualTo(("type",), "MESSAGE"), In(("topic",), ("a", "b")),
             GreaterThan(("offset",), 10), LessThan(("store_time",), 5)]
    left = [IsNull(("key",)), EqualTo(("queue_id",), 1), EqualTo(("offset",), "x")]
    assert list(reader.pushFilters(taken + left)) == left
    assert reader.pushed.sets == {"type": {"MESSAGE"}, "topic": {"a", "b"}}


def test_without_the_option_nothing_is_pushed_and_self_unions_are_right(spark, built_log):
    # Spark hands every scan of one DataFrame the pushed filters of one of them, which is
    # why pushdown is opt-in: the default source must get this union right.
    df = spark.read.format("fmq").option("tornTail", "allow").load(built_log.path)
    both = df.where(F.col("type") == "MESSAGE").unionByName(df.where(F.col("type") == "FILLER"))
    got = {r["type"]: r["count"] for r in both.groupBy("type").count().collect()}
    expected = {t: df.where(F.col("type") == t).count() for t in ("MESSAGE", "FILLER")}
    assert got == expected and expected["MESSAGE"] > 0 and expected["FILLER"] > 0
