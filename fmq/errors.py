"""The FMQ exception tree.

Every error FMQ raises on purpose is an :class:`FMQError`. Subclasses carry the
fields a caller needs to react (segment, offset, transaction id) and a message
that says what to do. ``retriable`` tells a client whether the same request may
succeed later without a change on the caller's side. ``code`` is the stable
number the wire protocol uses to carry the error class across the network.

A class with fields names them in ``fields`` (each with the type it is rebuilt as from
text) and writes its message from ``message_format``, whose ``{name}`` placeholders are
those fields: the wire carries only the message, and a client rebuilds the same error,
fields included, from it (``fmq.protocol.error_fields``, docs/protocol.md section 3).
"""

from __future__ import annotations

from typing import ClassVar


class FMQError(Exception):
    """Root of every error FMQ raises on purpose."""

    code = 1
    retriable = False
    #: The fields this class carries, with the type each is rebuilt as from its text.
    fields: ClassVar[dict[str, type]] = {}
    #: The message, with a ``{field}`` placeholder for every field (classes with fields).
    message_format = ""


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


class GroupHasMembers(InvalidArgument):
    """An offset reset of a consumer group that has live members."""

    code = 14
    fields = {"group": str, "members": int}
    message_format = (
        "consumer group {group} has {members} live members: they keep their own positions "
        "and would overwrite the reset. Stop them and retry, or pass --force")

    def __init__(self, group: str, members: int) -> None:
        super().__init__(self.message_format.format(group=group, members=members))
        self.group = group
        self.members = members


class ConfigError(FMQError, ValueError):
    """A configuration value is out of range or inconsistent."""

    code = 13


class OutOfOrderSequence(FMQError):
    """An idempotent producer's sequence number too far below its last stored one: the
    broker no longer remembers whether that message was stored (docs/format.md)."""

    code = 90
    fields = {"producer": str, "sequence": int, "last": int, "window": int}
    message_format = (
        "sequence {sequence} of producer {producer} is more than {window} below its last "
        "stored sequence {last}: the broker no longer knows whether it was stored, so it "
        "stored nothing. Check the topic for it before sending it again under a new "
        "sequence, or raise dedup_window_messages")

    def __init__(self, producer: str, sequence: int, last: int, window: int) -> None:
        super().__init__(self.message_format.format(producer=producer, sequence=sequence,
                                                    last=last, window=window))
        self.producer = producer
        self.sequence = sequence
        self.last = last
        self.window = window


# ---------------------------------------------------------------- storage


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


class CorruptLog(StorageError):
    """A record that fails its checks lies before valid records: not a torn tail.

    FMQ stops rather than cut acknowledged data. ``fmq log verify`` shows the
    damage; ``fmq log repair --cut-at OFFSET`` cuts there explicitly (losing
    everything after it).
    """

    code = 23
    fields = {"segment": str, "offset": int, "reason": str}
    message_format = (
        "corrupt record in segment {segment} at log offset {offset}: {reason}. Valid records "
        "follow it, so this is damage, not a torn tail; FMQ will not cut acknowledged data "
        "on its own. Inspect with `fmq log verify`, restore the data directory from a "
        "replica or backup, or cut explicitly with `fmq log repair DIR --cut-at {offset}`")

    def __init__(self, segment: str, offset: int, reason: str) -> None:
        super().__init__(self.message_format.format(segment=segment, offset=offset,
                                                    reason=reason))
        self.segment = segment
        self.offset = offset
        self.reason = reason


class TornRecord(StorageError):
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


# ---------------------------------------------------------------- replication


class ReplicationError(FMQError):
    """Base class of the errors of a broker group (a primary and its followers)."""

    code = 80


class NotPrimary(ReplicationError):
    """A write sent to a follower: followers take writes only from their primary."""

    code = 81
    retriable = True
    fields = {"primary": str}
    message_format = ("this server is a follower of {primary} and takes no writes: send "
                      "them to the primary at {primary}")

    def __init__(self, primary: str) -> None:
        super().__init__(self.message_format.format(primary=primary))
        self.primary = primary


class NotEnoughReplicas(ReplicationError):
    """``ack_mode = "sync"`` and fewer than ``min_insync`` followers have the record.

    The request was not acknowledged, but what it wrote stays in the primary's log (and
    reaches the followers once they catch up): a retry may store a message twice."""

    code = 82
    retriable = True
    fields = {"in_sync": int, "min_insync": int}
    message_format = (
        "only {in_sync} followers are in sync, fewer than min_insync ({min_insync}): the "
        "request was not acknowledged, though its records may be in the log; retry once "
        "followers catch up (fmq replica status)")

    def __init__(self, in_sync: int, min_insync: int) -> None:
        super().__init__(self.message_format.format(in_sync=in_sync, min_insync=min_insync))
        self.in_sync = in_sync
        self.min_insync = min_insync


class ReplicaBehindRetention(ReplicationError):
    """A follower asks for log bytes its primary has already deleted (retention)."""

    code = 83
    fields = {"offset": int, "first_offset": int}
    message_format = (
        "the follower needs the log from offset {offset}, but the primary's log starts at "
        "{first_offset} (retention deleted the rest): give the follower a fresh copy: stop "
        "it, empty its data directory, run fmq replica bootstrap there, start it again")

    def __init__(self, offset: int, first_offset: int) -> None:
        super().__init__(self.message_format.format(offset=offset, first_offset=first_offset))
        self.offset = offset
        self.first_offset = first_offset


class ReplicaDiverged(ReplicationError):
    """A follower's log does not continue the primary's: it holds bytes the primary lacks."""

    code = 84
    fields = {"offset": int, "end": int}
    message_format = (
        "the follower's log does not match the primary's at offset {offset} (the primary's "
        "durable end is {end}): the follower holds records the primary never had; cut it "
        "with fmq log repair --cut-at or give it a fresh copy (docs/replication.md)")

    def __init__(self, offset: int, end: int) -> None:
        super().__init__(self.message_format.format(offset=offset, end=end))
        self.offset = offset
        self.end = end


class CoordinatorUnavailable(FMQError):
    """The coordinator (etcd) could not be reached: leadership cannot be proved meanwhile."""

    code = 89
    retriable = True
# ---------------------------------------------------------------- security


class SecurityError(FMQError):
    """Base class of TLS, authentication and authorisation errors (never retriable: the
    same request fails the same way until the configuration changes)."""

    code = 70


class TLSFailed(SecurityError):
    """The TLS handshake failed: a certificate not trusted, a host name that does not
    match, or one side speaking TLS and the other not (docs/security.md)."""

    code = 71


class AuthenticationFailed(SecurityError):
    """Wrong user name or password, or a malformed SCRAM exchange."""

    code = 72


class AuthenticationRequired(SecurityError):
    """The server has users: a connection must authenticate before anything else."""

    code = 73


class AccessDenied(SecurityError):
    """No rule allows this user the operation on the resource, or a rule denies it."""

    code = 74
    fields = {"operation": str, "resource": str}
    message_format = (
        "access denied: {operation} on {resource} is not allowed for this user; an "
        "administrator can allow it with `fmq acl add` (docs/security.md)")

    def __init__(self, operation: str, resource: str) -> None:
        super().__init__(self.message_format.format(operation=operation, resource=resource))
        self.operation = operation
        self.resource = resource


def all_error_classes() -> dict[int, type[FMQError]]:
    """Map every error code to its class (the wire protocol uses this)."""
    found: dict[int, type[FMQError]] = {}
    pending: list[type[FMQError]] = [FMQError]
    while pending:
        cls = pending.pop()
        found.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return found
