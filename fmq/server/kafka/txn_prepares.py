"""Transactional Produce's prepares written together: the partitions of one Produce
request (and whatever other transactional Produces arrive in the same turn) become FMQ
prepared transactions placed one after the other and made durable by one flush, instead
of one flush each (docs/kafka.md, *Exactly-once*).

The coordinator places them under its lock and waits for their flush under it too, as it
did for one prepare: each is checked against its id's producer and epoch right before it
is placed, and nothing else changes the coordinator's state in between, so fencing is as
exact as when they were written one at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from fmq.engine.broker import Broker
from fmq.errors import DuplicateTransaction, FMQError
from fmq.message import Message
from fmq.server.kafka.txn_store import PRODUCER_GROUP


@dataclass
class PendingPrepare:
    """One partition's records of a transactional Produce, waiting to be prepared."""

    transactional_id: str
    producer_id: int
    epoch: int
    topic: str
    partition: int
    base_sequence: int
    messages: Sequence[Message]
    #: Set once the prepare is durable (None), or with the error that refused it.
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop()
                                 .create_future())


def prepare_together(broker: Broker, batches: list[tuple[Sequence[Message], str]]
                     ) -> list[FMQError | None]:
    """Prepare each ``(messages, FMQ transaction id)`` of ``batches`` (blocking); returns
    each one's outcome: None once durable (or a resent batch whose first copy is
    prepared), or the error that refused it. One flush for all of them when every
    acknowledgement waits for an fsync (flush mode ``sync``); else one at a time, since a
    prepare is fsync'd whatever the flush mode."""
    transactions = broker.transactions
    if broker.config.flush_mode != "sync":
        return [_prepared(transactions.prepare, messages, tx_id)
                for messages, tx_id in batches]
    outcomes: list[FMQError | None] = []
    placed = []
    for messages, tx_id in batches:
        try:
            placed.append(transactions.place_prepare(messages, PRODUCER_GROUP, tx_id))
        except DuplicateTransaction:
            # A resent batch whose first copy is prepared, or placed just before in this
            # call: stored once, answered once the flush below made it durable.
            pass
        except FMQError as exc:
            outcomes.append(exc)
            continue
        outcomes.append(None)
    failure: BaseException | None = None
    try:
        broker.wait_durable(max((end for _, end in placed), default=0))
    except FMQError as exc:  # the log failed: none of them is known to be durable
        failure = exc
    except BaseException as exc:
        failure = exc
        raise
    finally:
        for tx, _ in placed:
            transactions.prepare_done(tx, failure)
    if isinstance(failure, FMQError):
        return [outcome or failure for outcome in outcomes]
    return outcomes


def _prepared(prepare, messages: Sequence[Message], tx_id: str) -> FMQError | None:  # noqa: ANN001
    try:
        prepare(messages, PRODUCER_GROUP, tx_id)
    except DuplicateTransaction:
        pass  # a resent batch whose first copy is prepared: stored once
    except FMQError as exc:
        return exc
    return None
