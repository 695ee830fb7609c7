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

from fmq.errors.base import FMQError
from fmq.errors.cluster import (
    GroupProtocolUnchecked,
    NotHosted,
    RouteConflict,
    RouteHasLag,
    UnknownBrokerGroup,
)
from fmq.errors.input import (
    ConfigError,
    ExtensionMissing,
    GroupHasMembers,
    GroupProtocolConflict,
    InvalidArgument,
    MessageTooLarge,
    OutOfOrderSequence,
    UnknownQueue,
)
from fmq.errors.network import (
    ConnectionLost,
    DeliveryTimeout,
    NotAnFMQServer,
    NotSent,
    PrimaryNotFound,
    ProtocolError,
    RequestTimeout,
    ServerBusy,
)
from fmq.errors.replication import (
    CoordinatorUnavailable,
    LeadershipLost,
    NotEnoughReplicas,
    NotPrimary,
    OffsetNotReplicated,
    ReplicaBehindRetention,
    ReplicaDiverged,
    ReplicationError,
    StalePrimary,
)
from fmq.errors.security import (
    AccessDenied,
    AuthenticationFailed,
    AuthenticationRequired,
    DeniedByRule,
    SecurityError,
    TLSFailed,
    UsersNotLoaded,
)
from fmq.errors.storage import (
    BadRecord,
    BrokerClosed,
    CorruptCheckpoint,
    CorruptLog,
    DataDirLocked,
    IncompleteRecord,
    IndexCorrupt,
    IndexUnavailable,
    LogDamage,
    LogFailed,
    OffsetOutOfRange,
    SegmentUnavailable,
    StorageError,
    TornTail,
)
from fmq.errors.topics import TopicExists, TopicHasLag, UnknownTopic
from fmq.errors.transactions import (
    DuplicateTransaction,
    ScopeDecisionUnchecked,
    TooManyTransactions,
    TransactionConflict,
    TransactionError,
    TransactionInProgress,
    TransactionRolledBack,
    TransactionScopeClosed,
    UnknownTransaction,
)

__all__ = [
    "AccessDenied",
    "AuthenticationFailed",
    "AuthenticationRequired",
    "BadRecord",
    "BrokerClosed",
    "ConfigError",
    "ConnectionLost",
    "CoordinatorUnavailable",
    "CorruptCheckpoint",
    "CorruptLog",
    "DataDirLocked",
    "DeliveryTimeout",
    "DeniedByRule",
    "DuplicateTransaction",
    "ExtensionMissing",
    "FMQError",
    "GroupHasMembers",
    "GroupProtocolConflict",
    "GroupProtocolUnchecked",
    "IncompleteRecord",
    "IndexCorrupt",
    "IndexUnavailable",
    "InvalidArgument",
    "LeadershipLost",
    "LogDamage",
    "LogFailed",
    "MessageTooLarge",
    "NotAnFMQServer",
    "NotEnoughReplicas",
    "NotHosted",
    "NotPrimary",
    "NotSent",
    "OffsetNotReplicated",
    "OffsetOutOfRange",
    "OutOfOrderSequence",
    "PrimaryNotFound",
    "ProtocolError",
    "ReplicaBehindRetention",
    "ReplicaDiverged",
    "ReplicationError",
    "RequestTimeout",
    "RouteConflict",
    "RouteHasLag",
    "ScopeDecisionUnchecked",
    "SecurityError",
    "SegmentUnavailable",
    "ServerBusy",
    "StalePrimary",
    "StorageError",
    "TLSFailed",
    "TooManyTransactions",
    "TopicExists",
    "TopicHasLag",
    "TornTail",
    "TransactionConflict",
    "TransactionError",
    "TransactionInProgress",
    "TransactionRolledBack",
    "TransactionScopeClosed",
    "UnknownBrokerGroup",
    "UnknownQueue",
    "UnknownTopic",
    "UnknownTransaction",
    "UsersNotLoaded",
    "all_error_classes",
]


def all_error_classes() -> dict[int, type[FMQError]]:
    """Map every error code to its class (the wire protocol uses this)."""
    found: dict[int, type[FMQError]] = {}
    pending: list[type[FMQError]] = [FMQError]
    while pending:
        cls = pending.pop()
        found.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return found
