"""Errors of the Spark job, as subclasses of the :mod:`fmq.errors` tree (so ``fmq_errors``
in the CLI prints them as one line and callers can catch ``FMQError``), and the
translation of a failed Spark action back into them."""

from __future__ import annotations

from fmq.errors import CorruptLog, DataDirLocked, FMQError, StorageError, TornTail
from fmq.protocol.error_fields import find_error


class SparkJobError(FMQError):
    """The Spark job failed for a reason that is not damage in the log (Spark could not
    start, an executor died, a worker lacks fmq): the message carries Spark's own."""


class RebuildConflict(StorageError):
    """The rebuilt index disagrees with itself (a duplicate key LMDB's append mode
    refused): the log holds two records for one index key, which FMQ never writes."""


class GroupUnreachable(FMQError):
    """A broker group holding queues of a topic being read has no primary that answers
    now. The read fails rather than skip the group's queues; retriable (Spark retries the
    task, or the query runs again) once the group has a primary."""

    retriable = True

    def __init__(self, group: str, topic: str, reason: str) -> None:
        super().__init__(
            f"broker group {group}, which holds queues of topic {topic!r}, has no primary "
            f"that answers ({reason}): its queues are not skipped, so the read fails; it "
            f"can be retried once the group has a primary again (fmq cluster status)")
        self.group = group
        self.topic = topic


def translate_spark_error(exc: BaseException) -> FMQError:
    """A typed FMQ error for a failed Spark action. An executor's exception reaches the
    driver only as the text of its traceback inside Spark's own (PythonException carries
    no exception object), so CorruptLog / TornTail are found in that text and rebuilt with
    their fields, the way a client rebuilds an error from the wire."""
    text = str(exc)
    for cls in (CorruptLog, TornTail):
        found = find_error(cls, text)
        if found is not None:
            return found
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


__all__ = ["DataDirLocked", "GroupUnreachable", "RebuildConflict", "SparkJobError", "TornTail",
           "translate_spark_error"]
