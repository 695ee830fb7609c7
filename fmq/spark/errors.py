"""Errors of the Spark job, as subclasses of the :mod:`fmq.errors` tree (so ``fmq_errors``
in the CLI prints them as one line and callers can catch ``FMQError``), and the
translation of a failed Spark action back into them."""

from __future__ import annotations

import re

from fmq.errors import CorruptLog, DataDirLocked, FMQError, StorageError


class TornTail(StorageError):
    """The log ends with a torn record (a write that never completed) and the reader was
    asked to fail on it. The broker cuts a torn tail on its next open; the Spark reader
    accepts it with ``.option("tornTail", "allow")`` or ``mode=permissive``."""

    code = StorageError.code

    def __init__(self, segment: str, offset: int, reason: str) -> None:
        super().__init__(
            f"torn tail in segment {segment} at log offset {offset}: {reason}. Nothing valid "
            f"follows it: a write that never completed. Opening the broker cuts it; to read "
            f"the log as it is, use .option(\"tornTail\", \"allow\") or "
            f".option(\"mode\", \"permissive\")"
        )
        self.segment = segment
        self.offset = offset
        self.reason = reason


class SparkJobError(FMQError):
    """The Spark job failed for a reason that is not damage in the log (Spark could not
    start, an executor died, a worker lacks fmq): the message carries Spark's own."""


class RebuildConflict(StorageError):
    """The rebuilt index disagrees with itself (a duplicate key LMDB's append mode
    refused): the log holds two records for one index key, which FMQ never writes."""


# An executor's exception reaches the driver only as the text of its Python traceback
# inside Spark's own exception (PythonException carries no exception object), so the
# fields are read back off the messages CorruptLog and TornTail build.
_CORRUPT_RE = re.compile(
    r"corrupt record in segment (\S+) at log offset (\d+): (.*?)\. Valid records follow it")
_TORN_RE = re.compile(r"torn tail in segment (\S+) at log offset (\d+): (.*?)\. Nothing valid")


def translate_spark_error(exc: BaseException) -> FMQError:
    """A typed FMQ error for a failed Spark action: the executor's CorruptLog / TornTail
    comes back as text inside Spark's exception, so it is parsed out again."""
    text = str(exc)
    m = _CORRUPT_RE.search(text)
    if m:
        return CorruptLog(m.group(1), int(m.group(2)), m.group(3))
    m = _TORN_RE.search(text)
    if m:
        return TornTail(m.group(1), int(m.group(2)), m.group(3))
    for line in text.splitlines():  # Spark's messages open with a useful line
        if line.strip():
            first = line.strip()
            break
    else:
        first = type(exc).__name__
    return SparkJobError(
        f"the Spark job failed: {first[:500]}. Check that every executor has fmq installed "
        f"(pip install 'fmq[spark]') with the driver's Python version and can read the "
        f"segment files at the same path")


__all__ = ["DataDirLocked", "RebuildConflict", "SparkJobError", "TornTail",
           "translate_spark_error"]
