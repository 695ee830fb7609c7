"""The entries a record contributes to the index, as plain named tuples: a consume-queue
entry, a transaction end, a consumer offset, a term, a topic's configuration, a timer change.
:mod:`fmq.index.derive` makes them from records; :mod:`fmq.index.entries` is where the rest
of the package imports them from (with the derivation that runs, compiled or pure).

:class:`QueueEntry` is the record format's own (:mod:`fmq.log.record.queue_entry`: the log
builds it when it reads or places plain messages), re-exported here beside the others."""

from __future__ import annotations

from typing import NamedTuple

from fmq.log.record.queue_entry import QueueEntry  # the record format's, re-exported

#: The property of a TOPIC record holding its configuration (fmq.topic_config).
TOPIC_CONFIG_PROPERTY = "config"


class TxEnd(NamedTuple):
    tx_id: str
    producer_group: str  # with tx_id, what names the transaction
    committed: bool
    offset: int  # log offset of the COMMIT / ROLLBACK record


class OffsetEntry(NamedTuple):
    group: str
    topic: str
    queue_id: int
    offset: int  # the next queue offset the group consumes
    source_offset: int  # log offset of the OFFSET record


class EpochEntry(NamedTuple):
    """A primary's term: epoch ``epoch`` starts at log offset ``start`` (its EPOCH record)."""

    epoch: int
    start: int
    node: str


class TopicEntry(NamedTuple):
    """A topic's configuration (the JSON of a ``TopicConfig``) from its TOPIC record."""

    topic: str
    config: str
    source_offset: int


class TimerEntry(NamedTuple):
    """A pending timer: the TIMER record at ``offset`` becomes consumable at ``due``."""

    due: int  # ms since the Unix epoch
    offset: int
    size: int
    topic: str  # where the message goes when due


class TimerFired(NamedTuple):
    """The TIMER record at ``timer_offset`` was delivered: it is no longer pending."""

    timer_offset: int


#: What a record that takes no queue entry may put into the index.
Mark = TxEnd | OffsetEntry | EpochEntry | TopicEntry
#: A change to the pending timers.
TimerChange = TimerEntry | TimerFired
#: One thing a record puts into the index.
IndexItem = QueueEntry | Mark | TimerChange
