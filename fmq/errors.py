"""The FMQ exception tree.

Every error FMQ raises on purpose is an :class:`FMQError`. Subclasses carry the
fields a caller needs to react (segment, offset, transaction id) and a message
that says what to do. ``retriable`` tells a client whether the same request may
succeed later without a change on the caller's side. ``code`` is the stable
number the wire protocol uses to carry the error class across the network.
"""

from __future__ import annotations


class FMQError(Exception):
    """Root of every error FMQ raises on purpose."""

    code = 1
    retriable = False


# ---------------------------------------------------------------- user input


class InvalidArgument(FMQError, ValueError):
    """A request is malformed: fix the arguments and try again."""

    code = 10


class MessageTooLarge(InvalidArgument):
    """A message exceeds ``BrokerConfig.max_message_size``."""

    code = 11


class UnknownQueue(InvalidArgument):
    """A queue id outside ``0 .. queues_per_topic - 1``."""

    code = 12


class ConfigError(FMQError, ValueError):
    """A configuration value is out of range or inconsistent."""

    code = 13


# ---------------------------------------------------------------- storage


class StorageError(FMQError):
    """Problems with the files under the data directory."""

    code = 20


class DataDirLocked(StorageError):
    """Another process holds the data directory."""

    code = 21

    def __init__(self, path: str) -> None:
        super().__init__(
            f"data directory {path} is in use by another FMQ process; stop that process "
            f"or choose another --data-dir"
        )
        self.path = path


class LogFailed(StorageError):
    """A write or fsync failed; the log refuses appends until the broker restarts.

    Nothing written after the failure was acknowledged. Restart the broker: recovery
    keeps every record that reached the disk and cuts the rest.
    """

    code = 22

    def __init__(self, cause: BaseException | str) -> None:
        super().__init__(
            f"the log is failed after an I/O error ({cause}); no further writes are "
            f"accepted. Fix the disk problem (space, hardware) and restart the broker: "
            f"recovery keeps every acknowledged record"
        )
        self.cause = cause


class SegmentUnavailable(StorageError):
    """The next log segment could not be created (no free file descriptor, disk full).

    Nothing of the refused request was written and the log stays usable: the next append
    tries to create the segment again.
    """

    code = 31
    retriable = True

    def __init__(self, path: str, cause: OSError) -> None:
        super().__init__(
            f"cannot create the next log segment {path} ({cause.strerror or cause}); the "
            f"request was not stored, retry later. Free file descriptors (raise the process's "
            f"open-file limit, `ulimit -n`, or lower max_connections) or disk space (retention, "
            f"a bigger disk); the log keeps working once the segment can be created"
        )
        self.path = path
        self.cause = cause


class CorruptLog(StorageError):
    """A record that fails its checks lies before valid records: not a torn tail.

    FMQ stops rather than cut acknowledged data. ``fmq log verify`` shows the
    damage; ``fmq log repair --cut-at OFFSET`` cuts there explicitly (losing
    everything after it).
    """

    code = 23

    def __init__(self, segment: str, offset: int, reason: str) -> None:
        super().__init__(
            f"corrupt record in segment {segment} at log offset {offset}: {reason}. "
            f"Valid records follow it, so this is damage, not a torn tail; FMQ will not cut "
            f"acknowledged data on its own. Inspect with `fmq log verify`, restore the data "
            f"directory from a replica or backup, or cut explicitly with "
            f"`fmq log repair DIR --cut-at {offset}`"
        )
        self.segment = segment
        self.offset = offset
        self.reason = reason


class TornRecord(StorageError):
    """The bytes end inside a record: the record was never completely written."""

    code = 28

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"incomplete record at log offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class BadRecord(StorageError):
    """A record's checksum or one of its fields does not check out."""

    code = 29

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"bad record at log offset {offset}: {reason}")
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


# ---------------------------------------------------------------- transactions


class TransactionError(FMQError):
    """Base class of transaction errors."""

    code = 40


class TooManyTransactions(TransactionError):
    """The open-transaction limit is reached; commit or roll back some first."""

    code = 41
    retriable = True


class DuplicateTransaction(TransactionError):
    """The transaction id belongs to a transaction that is fully prepared (open,
    committing or committed); pick another id. A client that retried a prepare whose
    answer it lost may take this as "my prepare is stored": a transaction is only ever
    open here once every one of its messages is durable."""

    code = 42


class UnknownTransaction(TransactionError):
    """No open or recently finished transaction has this id."""

    code = 43


class TransactionConflict(TransactionError):
    """Commit after rollback, or rollback after commit (or of a committing transaction)."""

    code = 44


class TransactionRolledBack(TransactionError):
    """The transaction id belongs to a rolled-back transaction, for example a prepare that
    a crash cut short, which recovery rolled back. Nothing of it is stored: prepare the
    messages again under a new transaction id (never commit this one)."""

    code = 45


class TransactionInProgress(TransactionError):
    """A prepare with this transaction id is being written right now (an earlier attempt
    of the same request); retry shortly to learn its outcome."""

    code = 46
    retriable = True


# ---------------------------------------------------------------- network


class ProtocolError(FMQError):
    """A frame that does not follow docs/protocol.md."""

    code = 60


class ConnectionLost(FMQError):
    """The connection to the server broke; the request may or may not have been applied."""

    code = 61
    retriable = True


class RequestTimeout(FMQError):
    """The server did not answer in time; the request may or may not have been applied."""

    code = 62
    retriable = True


class ServerBusy(FMQError):
    """The server refused the request because a limit was reached; retry later."""

    code = 63
    retriable = True


def all_error_classes() -> dict[int, type[FMQError]]:
    """Map every error code to its class (the wire protocol uses this)."""
    found: dict[int, type[FMQError]] = {}
    pending: list[type[FMQError]] = [FMQError]
    while pending:
        cls = pending.pop()
        found.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return found
