"""A primary's term: the EPOCH record that starts it, and where a follower's log diverges
from its primary's (Kafka's leader-epoch truncation, KIP-101).

A node that becomes primary (``fmq replica promote``, an election) appends one EPOCH
record with its epoch and node name and fdatasyncs it before it writes or acknowledges
anything else, so every record after it belongs to the new term. That includes what its
recovery writes itself (the ROLLBACK of a prepare whose last records never reached it):
written before the EPOCH record, such a record would count as the old term's although the
old primary's log holds other records at that offset, and the old primary could not be
cut back to where the new term starts.

A node that starts following finds where its log and its primary's last agree
(:func:`divergence_point`, KIP-101 with KIP-279's repeated question): it asks where its own
last epoch ends in the primary's log (EPOCH_END); the primary answers with the largest
epoch it holds at or below the one asked. An epoch both logs hold was written by one
primary only, so the two logs are the same up to where it ends in the shorter of them;
when this node does not hold the epoch answered, it asks again for the largest epoch it
holds below that one. Whatever it holds past the agreed point was written by a primary of
an older term and never reached the new one, so it was never acknowledged in ``sync``
mode: the node cuts it (docs/replication.md, *Epochs and truncation*).
"""

from __future__ import annotations

from collections.abc import Callable

from fmq.config import BrokerConfig
from fmq.engine.broker import Broker
from fmq.errors import ReplicationError
from fmq.index.entries import EpochEntry
from fmq.index.epochs import epoch_end, last_epoch

#: A primary's EPOCH_END answer: epoch asked -> (the largest epoch it holds at or below it,
#: the log offset where that epoch ends in its log).
EpochEndQuestion = Callable[[int], tuple[int, int]]

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


def divergence_point(history: list[EpochEntry], log_end: int, ask: EpochEndQuestion) -> int:
    """Where this log must be cut to continue its primary's: the end of the longest prefix
    both logs hold, found by asking the primary ``ask(epoch)`` -> (the largest epoch it
    holds at or below ``epoch``, where that epoch ends in its log), its EPOCH_END answer.
    ``history`` and ``log_end`` are this node's. Returns ``log_end`` when nothing is to
    be cut.

    The first question is this log's newest epoch. When the primary answers an epoch this
    log also holds, both logs hold that epoch's records up to where it ends in the shorter
    one (one primary wrote them all), and differ right after (the next term of one of them
    is not in the other): the cut is there. When this log does not hold the epoch
    answered, its own end of the nearest epoch below is no evidence of anything the
    primary holds (another primary's term may have started before it): ask again for the
    largest epoch this log holds below the answer. The epoch asked falls every round and
    epoch 0 (before the first EPOCH record) is held by every log, so at most
    ``len(history) + 1`` questions are asked."""
    asked = last_epoch(history)
    for _ in range(len(history) + 1):
        answered, primary_end = ask(asked)
        if answered > asked:
            # Not a ProtocolError: the follower takes that for an older primary refusing
            # a field it does not know.
            raise ReplicationError(f"the primary answered EPOCH_END for epoch {asked} with "
                                   f"epoch {answered}, above the one asked: it must answer "
                                   "the largest epoch it holds at or below it; check that "
                                   "this node follows an FMQ primary of its own group")
        held, own_end = epoch_end(history, answered, log_end)
        if held == answered:
            return min(log_end, own_end, primary_end)
        asked = held
    raise AssertionError("unreachable: the epoch asked falls every round")  # pragma: no cover
