"""A primary's term: the EPOCH record that starts it, and where a follower's log diverges
from its primary's (Kafka's leader-epoch truncation, KIP-101).

A node that becomes primary (``fmq replica promote``, an election) appends one EPOCH
record with its epoch and node name and fdatasyncs it before it writes or acknowledges
anything else, so every record after it belongs to the new term. That includes what its
recovery writes itself (the ROLLBACK of a prepare whose last records never reached it):
written before the EPOCH record, such a record would count as the old term's although the
old primary's log holds other records at that offset, and the old primary could not be
cut back to where the new term starts. A node that starts following asks its
primary where its own last epoch ends in the primary's log (EPOCH_END); whatever it holds
past that point was written by a primary of an older term and never reached the new one,
so it was never acknowledged in ``sync`` mode: the node cuts it (docs/replication.md).
"""

from __future__ import annotations

from fmq.config import BrokerConfig
from fmq.engine.broker import Broker
from fmq.index.entries import EpochEntry
from fmq.index.epochs import epoch_end, last_epoch

#: How long the new term waits for its EPOCH record to be indexed (it always is at once,
#: unless the index cannot be written).
_INDEX_WAIT_S = 30.0


def current_epoch(broker: Broker) -> int:
    """The newest epoch ``broker``'s log records (0: none)."""
    return last_epoch(broker.replica.epoch_history())


def start_term(broker: Broker, epoch: int, node: str) -> EpochEntry:
    """Append the EPOCH record of term ``epoch`` started by ``node``, fdatasync it and wait
    until the epoch history has it. Call it before the term acknowledges anything."""
    known = current_epoch(broker)
    if epoch <= known:
        raise ValueError(f"epoch {epoch} is not above the log's newest epoch {known}")
    return broker.replica.append_epoch(epoch, node, _INDEX_WAIT_S)


def open_as_primary(data_dir: str, config: BrokerConfig, min_epoch: int,
                    node: str) -> tuple[Broker, EpochEntry]:
    """Open the broker at ``data_dir`` as the primary of a new term, above both
    ``min_epoch - 1`` and the newest epoch its log records, started by ``node``: recovery
    runs, then the EPOCH record is written before any other record of the broker's own."""
    started: list[EpochEntry] = []

    def begin_term(broker: Broker) -> None:
        epoch = max(min_epoch, current_epoch(broker) + 1)
        started.append(start_term(broker, epoch, node))

    broker = Broker.open(data_dir, config.replace(follow=""), before_writes=begin_term)
    return broker, started[0]


def divergence_point(history: list[EpochEntry], log_end: int, primary_epoch: int,
                     primary_end: int) -> int:
    """Where this log must be cut to continue its primary's: ``history`` and ``log_end``
    are this node's; the primary answered EPOCH_END for this node's last epoch with
    (``primary_epoch``, the largest epoch it knows at or below it, ``primary_end``, where
    that epoch ends in its log). Returns ``log_end`` when nothing is to be cut."""
    _, own_end = epoch_end(history, primary_epoch, log_end)
    return min(log_end, own_end, primary_end)
