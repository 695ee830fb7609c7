"""spark.read.format("fmq"): rows, options, and the same damage verdicts as LogScanner."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from fmq.cli.main import cli

from fmq.log.reader import list_segments
from fmq.log.scanner import LogScanner
from fmq.spark.rows import RECORD_FIELDS

from . import damage as D


def _rows(spark, path: str, **options) -> list[dict]:
    reader = spark.read.format("fmq")
    for k, v in options.items():
        reader = reader.option(k, v)
    return [r.asDict(recursive=True) for r in reader.load(path).orderBy("offset").collect()]


def _records_only(rows: list[dict]) -> list[dict]:
    return [{k: r[k] for k in RECORD_FIELDS} for r in rows if r["damage"] is None]


def test_rows_equal_log_dump_json(spark, built_log):
    dumped = CliRunner().invoke(cli, ["log", "dump", built_log.path, "--json"])
    assert dumped.exit_code == 0, dumped.output
    expected = [json.loads(line) for line in dumped.stdout.splitlines()]
    rows = _rows(spark, built_log.path, tornTail="allow")
    assert _records_only(rows) == expected
    assert len(expected) > 150
    types = {r["type"] for r in expected}
    assert {"MESSAGE", "PREPARE", "PRE_MESSAGE", "REF_MESSAGE", "TX_MESSAGE", "COMMIT",
            "ROLLBACK", "FILLER"} <= types
    # The torn tail is the one damage row, where LogScanner puts it.
    torn = [r for r in rows if r["damage"] is not None]
    assert [(t["offset"], t["damage"]["kind"]) for t in torn] == [(built_log.torn_offset, "torn")]


def test_one_partition_per_segment_and_log_dir_path(spark, built_log):
    log_dir = D.log_dir(built_log.path)
    df = spark.read.format("fmq").option("tornTail", "allow").load(log_dir)
    assert df.rdd.getNumPartitions() == len(list_segments(log_dir)) >= 4
    segs = {r["segment"] for r in df.select("segment").distinct().collect()}
    assert segs == {f"{b:020d}.seg" for b in list_segments(log_dir)}


def test_large_segments_are_read_in_ranges_with_the_same_rows(spark, built_log):
    log_dir = D.log_dir(built_log.path)
    whole = spark.read.format("fmq").option("tornTail", "allow").option("body", "true")
    split = whole.option("splitBytes", "2000")
    assert split.load(log_dir).rdd.getNumPartitions() > 3 * len(list_segments(log_dir))
    rows = [r.asDict(recursive=True) for r in split.load(log_dir).orderBy("offset").collect()]
    assert rows == [r.asDict(recursive=True)
                    for r in whole.load(log_dir).orderBy("offset").collect()]


def test_body_only_when_asked(spark, built_log):
    plain = spark.read.format("fmq").option("tornTail", "allow").load(built_log.path)
    assert "body" not in plain.columns
    rows = _rows(spark, built_log.path, tornTail="allow", body="true")
    bodies = {r.log_offset: bytes(r.body) for r in LogScanner(D.log_dir(built_log.path))}
    got = {r["offset"]: bytes(r["body"]) for r in rows if r["damage"] is None}
    assert got == bodies
    assert all(len(got[r["offset"]]) == r["body_size"] for r in rows if r["damage"] is None)


def test_pyarrow_filesystem_uri_reads_the_same_rows(spark, built_log):
    local = _rows(spark, built_log.path, tornTail="allow")
    via_uri = _rows(spark, "file://" + os.path.abspath(built_log.path), tornTail="allow")
    assert via_uri == local


def test_torn_tail_fails_by_default_naming_segment_and_offset(spark, built_log):
    with pytest.raises(Exception) as info:
        spark.read.format("fmq").load(built_log.path).count()
    text = str(info.value)
    last = f"{list_segments(D.log_dir(built_log.path))[-1]:020d}.seg"
    assert f"torn tail in segment {last} at log offset {built_log.torn_offset}" in text


def test_corruption_in_sealed_segment_fails_naming_segment_and_offset(spark, log_copy):
    segment, offset = D.flip_body_byte_in_sealed_segment(log_copy)
    with pytest.raises(Exception) as info:
        spark.read.format("fmq").option("tornTail", "allow").load(log_copy).count()
    assert f"corrupt record in segment {segment} at log offset {offset}" in str(info.value)


def test_text_that_does_not_decode_fails_like_the_row_decoder(spark, log_copy):
    # The column-wise path validates text in bulk; the record it cannot decode is judged
    # by the record decoder, as recovery judges it.
    segment, offset = D.bad_text_with_valid_crc_in_sealed_segment(log_copy)
    with pytest.raises(Exception) as info:
        spark.read.format("fmq").option("tornTail", "allow").load(log_copy).count()
    assert f"corrupt record in segment {segment} at log offset {offset}" in str(info.value)


def test_bad_option_is_refused(spark, built_log):
    with pytest.raises(Exception, match="mode"):
        spark.read.format("fmq").option("mode", "sloppy").load(built_log.path).count()


@pytest.mark.parametrize("damage", [
    None,
    D.flip_body_byte_in_sealed_segment,
    D.delete_middle_segment,
    D.zero_filler_of_first_segment,
    D.garbage_segment_after_the_last,
    D.bad_text_with_valid_crc_in_sealed_segment,
], ids=lambda f: "torn_tail_only" if f is None else f.__name__)
@pytest.mark.parametrize("split_bytes", [None, 3000], ids=["whole", "split"])
def test_permissive_mode_reports_what_log_scanner_reports(spark, log_copy, damage, split_bytes):
    if damage is not None:
        damage(log_copy)
    scanner = LogScanner(D.log_dir(log_copy), on_corruption="skip")
    expected_records = [r.to_dict() for r in scanner]
    expected_damage = sorted(
        (d.offset, d.kind, d.segment, d.reason)
        for d in scanner.damages + ([scanner.torn] if scanner.torn else []))
    assert expected_damage, "the damage function did no damage"
    options = {"mode": "permissive"} | ({"splitBytes": str(split_bytes)} if split_bytes else {})
    rows = _rows(spark, log_copy, **options)
    assert _records_only(rows) == expected_records
    got_damage = sorted((r["offset"], r["damage"]["kind"], r["segment"], r["damage"]["reason"])
                        for r in rows if r["damage"] is not None)
    assert got_damage == expected_damage


def test_store_timestamp_is_store_time_as_a_spark_timestamp(spark, log_copy):
    """store_timestamp is the instant store_time (ms) names, as TimestampType (what the
    topic source calls store_time); the column-wise path and the record-by-record fallback
    (a record whose text does not decode sends its segment there) give the same; a damage
    row has none."""
    from datetime import UTC, datetime

    from pyspark.sql.types import TimestampType

    D.bad_text_with_valid_crc_in_sealed_segment(log_copy)  # one segment read row by row
    df = spark.read.format("fmq").option("mode", "permissive").load(log_copy)
    assert isinstance(df.schema["store_timestamp"].dataType, TimestampType)
    rows = df.select("offset", "store_time", "store_timestamp", "damage").collect()
    records = [r for r in rows if r["damage"] is None]
    assert len(records) > 150 and any(r["damage"] is not None for r in rows)
    for r in records:
        want = datetime.fromtimestamp(r["store_time"] / 1000, UTC)
        assert r["store_timestamp"].astimezone(UTC) == want, r
    assert all(r["store_timestamp"] is None for r in rows if r["damage"] is not None)
    # In Spark SQL: the same milliseconds back, for every record row.
    assert df.where("damage IS NULL AND unix_millis(store_timestamp) = store_time").count() \
        == len(records)
