"""The FMQ Python client: synchronous and thread-safe.

* :class:`Producer`: ``send`` / ``send_batch``, and ``send_async`` / ``flush`` with
  client-side batching (``linger_ms``, ``batch_size``, ``buffer_memory``);
* :class:`fmq.client.aio.AsyncProducer`: the same for asyncio code;
* :class:`TransactionProducer`: ``send_in_transaction(messages, local_transaction)``,
  ``with producer.transaction() as tx``, ``commit_with_next`` (a :class:`PendingCommit`
  written with the next PREPARE), and a feedback thread that asks ``checker`` about
  transactions left open;
* :class:`Consumer`: consumer groups, ``poll`` / ``commit`` / iteration.

Errors are the :class:`fmq.FMQError` tree: a server error arrives as the same class the
embedded API raises; ``retriable`` says whether the same request may succeed later.
"""

from fmq.client.base import Client
from fmq.client.batching import BufferFull
from fmq.client.cluster.placement import SpansGroups
from fmq.client.connection import Connection, parse_servers
from fmq.client.consumer import Consumer
from fmq.client.pending_commit import PendingCommit
from fmq.client.producer import Producer, TransactionResult
from fmq.client.tls import TLSOptions
from fmq.client.tx_producer import Transaction, TransactionProducer

__all__ = ["BufferFull", "Client", "Connection", "Consumer", "PendingCommit", "Producer",
           "SpansGroups",
           "TLSOptions", "Transaction", "TransactionProducer", "TransactionResult",
           "parse_servers"]
