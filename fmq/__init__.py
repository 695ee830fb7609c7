"""FMQ: a durable message store with transactional messages.

Start here::

    import fmq

    with fmq.Broker.open("/var/lib/fmq") as broker:
        result = broker.send(fmq.Message("orders", b'{"id": 1}', key="order-1"))
        tx_id = broker.transactions.prepare([fmq.Message("payments", b"debit 10")],
                                            producer_group="shop")
        broker.transactions.commit(tx_id)
        broker.wait_indexed()
        messages = broker.reads.pull("orders", result.queue_id, 0)

Packages: ``fmq.log`` (record format, segments, group commit), ``fmq.index`` (the LMDB
index and the dispatcher), ``fmq.tx`` (transaction records, state and feedback),
``fmq.recovery`` (checkpoint, redo and roll-forward), ``fmq.engine`` (the broker),
``fmq.admin`` (offline tools for a stopped data directory). ``docs/`` holds the format spec
and the operations guide.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fmq.config import BrokerConfig
from fmq.errors import (
    BadRecord,
    BrokerClosed,
    ConfigError,
    CorruptCheckpoint,
    CorruptLog,
    DataDirLocked,
    DuplicateTransaction,
    FMQError,
    IncompleteRecord,
    IndexCorrupt,
    IndexUnavailable,
    InvalidArgument,
    LogFailed,
    MessageTooLarge,
    OffsetOutOfRange,
    OutOfOrderSequence,
    SegmentUnavailable,
    StorageError,
    TooManyTransactions,
    TransactionConflict,
    TransactionError,
    TransactionInProgress,
    TransactionRolledBack,
    TransactionScopeClosed,
    UnknownQueue,
    UnknownTransaction,
)
from fmq.message import Message, ScheduledSend, SendResult, StoredMessage
from fmq.tx.state import TxState, UncertainTx
from fmq.version import __version__

if TYPE_CHECKING:
    from fmq.engine.broker import Broker


def __getattr__(name: str) -> object:
    # The broker (and with it LMDB) loads on first use of ``fmq.Broker``, so that
    # ``import fmq.client`` in an application needs none of the server's storage libraries.
    if name == "Broker":
        from fmq.engine.broker import Broker

        return Broker
    raise AttributeError(f"module 'fmq' has no attribute {name!r}")

__all__ = [
    "BadRecord",
    "Broker",
    "BrokerClosed",
    "BrokerConfig",
    "ConfigError",
    "CorruptCheckpoint",
    "CorruptLog",
    "DataDirLocked",
    "DuplicateTransaction",
    "FMQError",
    "IndexCorrupt",
    "IndexUnavailable",
    "InvalidArgument",
    "LogFailed",
    "Message",
    "MessageTooLarge",
    "OffsetOutOfRange",
    "ScheduledSend",
    "OutOfOrderSequence",
    "SegmentUnavailable",
    "SendResult",
    "StorageError",
    "StoredMessage",
    "TooManyTransactions",
    "IncompleteRecord",
    "TransactionConflict",
    "TransactionInProgress",
    "TransactionRolledBack",
    "TransactionScopeClosed",
    "TransactionError",
    "TxState",
    "UncertainTx",
    "UnknownQueue",
    "UnknownTransaction",
    "__version__",
]
