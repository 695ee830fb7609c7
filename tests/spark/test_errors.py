"""A failed Spark action becomes the typed FMQ error the executor raised."""

from __future__ import annotations

from fmq.errors import CorruptLog
from fmq.spark.errors import SparkJobError, TornTail, translate_spark_error


def _wrapped(exc: Exception) -> Exception:
    # What the driver sees: the executor's exception only as text in Spark's own.
    return RuntimeError(f"Job aborted due to stage failure\nTraceback ...\n"
                        f"{type(exc).__module__}.{type(exc).__name__}: {exc}\n")


def test_corrupt_log_and_torn_tail_come_back_typed():
    got = translate_spark_error(_wrapped(CorruptLog("00000000000000000000.log", 4096,
                                                    "CRC-32C mismatch")))
    assert isinstance(got, CorruptLog)
    assert (got.segment, got.offset, got.reason) == ("00000000000000000000.log", 4096,
                                                     "CRC-32C mismatch")
    got = translate_spark_error(_wrapped(TornTail("00000000000000001024.log", 2048,
                                                  "record runs past the file end")))
    assert isinstance(got, TornTail)
    assert (got.segment, got.offset) == ("00000000000000001024.log", 2048)


def test_any_other_failure_is_a_spark_job_error_naming_spark_s_first_line():
    got = translate_spark_error(RuntimeError("\n  Python worker exited unexpectedly\nmore"))
    assert isinstance(got, SparkJobError)
    assert "Python worker exited unexpectedly" in str(got) and "fmq[spark]" in str(got)
