"""Errors of the Spark job, as subclasses of the :mod:`fmq.errors` tree (so ``fmq_errors``
in the CLI prints them as one line and callers can catch ``FMQError``)."""

from __future__ import annotations

from fmq.errors import DataDirLocked, FMQError, StorageError


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


__all__ = ["DataDirLocked", "RebuildConflict", "SparkJobError", "TornTail"]
