"""Errors of the data directory, the log and the index, and of a closed broker."""

from __future__ import annotations

from fmq.errors.base import FMQError
from fmq.errors.input import InvalidArgument


class StorageError(FMQError):
    """Problems with the files under the data directory."""

    code = 20


class DataDirLocked(StorageError):
    """Another process holds the data directory."""

    code = 21
    fields = {"path": str}
    message_format = ("data directory {path} is in use by another FMQ process; stop that "
                      "process or choose another --data-dir")

    def __init__(self, path: str) -> None:
        super().__init__(self.message_format.format(path=path))
        self.path = path


class LogFailed(StorageError):
    """A write or fsync failed; the log refuses appends until the broker restarts.

    Nothing written after the failure was acknowledged. Restart the broker: recovery
    keeps every record that reached the disk and cuts the rest.
    """

    code = 22
    fields = {"cause": str}  # across the wire the cause is its text
    message_format = ("the log is failed after an I/O error ({cause}); no further writes are "
                      "accepted. Fix the disk problem (space, hardware) and restart the "
                      "broker: recovery keeps every acknowledged record")

    def __init__(self, cause: BaseException | str) -> None:
        super().__init__(self.message_format.format(cause=cause))
        self.cause = cause


class SegmentUnavailable(StorageError):
    """The next log segment could not be created (no free file descriptor, disk full).

    Nothing of the refused request was written and the log stays usable: the next append
    tries to create the segment again.
    """

    code = 31
    retriable = True
    fields = {"path": str, "cause": OSError}  # across the wire: an OSError of its text
    message_format = (
        "cannot create the next log segment {path} ({cause}); the request was not stored, "
        "retry later. Free file descriptors (raise the process's open-file limit, "
        "`ulimit -n`, or lower max_connections) or disk space (retention, a bigger disk); "
        "the log keeps working once the segment can be created")

    def __init__(self, path: str, cause: OSError) -> None:
        super().__init__(self.message_format.format(path=path, cause=cause.strerror or cause))
        self.path = path
        self.cause = cause


class LogDamage(StorageError):
    """A damaged record in the log, named by segment and log offset (the two verdicts
    below: corruption, or a torn tail a reader was asked to fail on)."""

    fields = {"segment": str, "offset": int, "reason": str}

    def __init__(self, segment: str, offset: int, reason: str) -> None:
        super().__init__(self.message_format.format(segment=segment, offset=offset,
                                                    reason=reason))
        self.segment = segment
        self.offset = offset
        self.reason = reason


class CorruptLog(LogDamage):
    """A record that fails its checks lies before valid records: not a torn tail.

    FMQ stops rather than cut acknowledged data. ``fmq log verify`` shows the
    damage; ``fmq log repair --cut-at OFFSET`` cuts there explicitly (keeping what it
    cuts for an undo).
    """

    code = 23
    message_format = (
        "corrupt record in segment {segment} at log offset {offset}: {reason}. Valid records "
        "follow it, so this is damage, not a torn tail; FMQ will not cut acknowledged data "
        "on its own. Inspect with `fmq log verify`, restore the data directory from a "
        "replica or backup, or cut explicitly with `fmq log repair DIR --cut-at {offset}`")


class TornTail(LogDamage):
    """The log ends with a torn record (a write that never completed) and the reader was
    asked to fail on it (the Spark reader's ``tornTail`` option). The broker cuts a torn
    tail on its next open."""

    code = StorageError.code
    message_format = (
        "torn tail in segment {segment} at log offset {offset}: {reason}. Nothing valid "
        "follows it: a write that never completed. Opening the broker cuts it; to read "
        "the log as it is, use .option(\"tornTail\", \"allow\") or "
        ".option(\"mode\", \"permissive\")")


class IncompleteRecord(StorageError):
    """The bytes end inside a record: the record was never completely written."""

    code = 28
    fields = {"offset": int, "reason": str}
    message_format = "incomplete record at log offset {offset}: {reason}"

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(self.message_format.format(offset=offset, reason=reason))
        self.offset = offset
        self.reason = reason


class BadRecord(StorageError):
    """A record's checksum or one of its fields does not check out."""

    code = 29
    fields = {"offset": int, "reason": str}
    message_format = "bad record at log offset {offset}: {reason}"

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(self.message_format.format(offset=offset, reason=reason))
        self.offset = offset
        self.reason = reason


class CorruptCheckpoint(StorageError):
    """The checkpoint file is damaged (recovery then replays the whole log)."""

    code = 24


class IndexCorrupt(StorageError):
    """The LMDB index cannot be opened or is inconsistent; rebuild it from the log."""

    code = 25


class IndexUnavailable(StorageError):
    """The index cannot take new messages now (its writes fail, e.g. the disk is full, or it
    lags too far behind the log); the message was not stored. Retry later.

    FMQ retries the index writes by itself; new sends and prepares are refused meanwhile so
    that nothing is acknowledged that consumers cannot read.
    """

    code = 30
    retriable = True


class BrokerClosed(FMQError):
    """The broker was closed; open it again."""

    code = 26


class OffsetOutOfRange(InvalidArgument):
    """A log offset that does not address a record of this log."""

    code = 27
