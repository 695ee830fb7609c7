"""FMQ: a durable message store with transactional messages.

Start here::

    import fmq

    with fmq.Broker.open("/var/lib/fmq") as broker:
        result = broker.send(fmq.Message("orders", b'{"id": 1}', key="order-1"))
        tx_id = broker.prepare([fmq.Message("payments", b"debit 10")], producer_group="shop")
        broker.commit(tx_id)
        broker.wait_indexed()
        messages = broker.pull("orders", result.queue_id, 0)

Packages: ``fmq.log`` (record format, segments, group commit), ``fmq.index`` (the LMDB
index and the dispatcher), ``fmq.recovery`` (checkpoint and redo), ``fmq.tx`` (transaction
manager and feedback). ``docs/`` holds the format spec and the operations guide.
"""

__version__ = "0.1.0"

from fmq.broker import Broker  # noqa: E402
from fmq.config import BrokerConfig  # noqa: E402
from fmq.errors import (  # noqa: E402
    BadRecord,
    BrokerClosed,
    ConfigError,
    CorruptCheckpoint,
    CorruptLog,
    DataDirLocked,
    DuplicateTransaction,
    FMQError,
    IndexCorrupt,
    IndexUnavailable,
    InvalidArgument,
    LogFailed,
    MessageTooLarge,
    OffsetOutOfRange,
    SegmentUnavailable,
    StorageError,
    TooManyTransactions,
    TornRecord,
    TransactionConflict,
    TransactionError,
    TransactionInProgress,
    TransactionRolledBack,
    UnknownQueue,
    UnknownTransaction,
)
from fmq.message import Message, SendResult, StoredMessage  # noqa: E402
from fmq.tx.manager import TxState, UncertainTx  # noqa: E402

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
    "SegmentUnavailable",
    "SendResult",
    "StorageError",
    "StoredMessage",
    "TooManyTransactions",
    "TornRecord",
    "TransactionConflict",
    "TransactionInProgress",
    "TransactionRolledBack",
    "TransactionError",
    "TxState",
    "UncertainTx",
    "UnknownQueue",
    "UnknownTransaction",
    "__version__",
]
