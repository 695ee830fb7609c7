"""What a record contributes to the index: pure functions, shared by the online
dispatcher, recovery's redo pass and the Spark rebuild job (through
:mod:`fmq.index.entries`, which runs this module compiled where setup.py built it).

MESSAGE, REF_MESSAGE and TX_MESSAGE records get a consume-queue entry; COMMIT and ROLLBACK
records get a transaction-end entry (so a retried commit or rollback is answered with the
final state even after a restart). A TIMER record adds a pending timer; a MESSAGE whose
``ref_offset`` names a TIMER fires it (removes it from the pending timers), and so does a
TIMER naming one (retention moved it: the new one replaces it). A REF_MESSAGE's entry points
at its PRE_MESSAGE record (which holds the body), so a consumer reads the body with one
lookup; MESSAGE and TX_MESSAGE entries point at the record itself. OFFSET records set a
consumer group's committed offset (the latest in log order wins); an EPOCH record adds its
term to the epoch history (:mod:`fmq.index.epochs`); a TOPIC record sets the topic's
configuration (and a delete's queue floors, :func:`fmq.index.trim.raise_topic_floors`).
PREPARE, PRE_MESSAGE
and FILLER contribute nothing (they still advance the applied offset).

:func:`index_items` is the one classification of a record for the index; the dispatcher
(both ways it learns of records) and recovery's redo pass go through it, and
:func:`sort_items` files its items into the lists :meth:`IndexStore.apply` takes.
"""

from __future__ import annotations

from fmq.index.entry_types import (
    TOPIC_CONFIG_PROPERTY,
    EpochEntry,
    IndexItem,
    Mark,
    OffsetEntry,
    QueueEntry,
    TimerChange,
    TimerEntry,
    TimerFired,
    TopicEntry,
    TxEnd,
)
from fmq.log.record import Record, RecordType, crc32c

# The record types as module constants: an enum member looked up through its class
# costs a few times a global read, and every appended record goes through here.
_MESSAGE = RecordType.MESSAGE
_TX_MESSAGE = RecordType.TX_MESSAGE
_REF_MESSAGE = RecordType.REF_MESSAGE
_COMMIT = RecordType.COMMIT
_ROLLBACK = RecordType.ROLLBACK
_OFFSET = RecordType.OFFSET
_EPOCH = RecordType.EPOCH
_TIMER = RecordType.TIMER
_PREPARE = RecordType.PREPARE
_PRE_MESSAGE = RecordType.PRE_MESSAGE
_TOPIC = RecordType.TOPIC


def tag_hash(tags: str | None) -> int:
    return crc32c(tags.encode()) if tags else 0


def queue_entry(record: Record) -> QueueEntry | None:
    """The consume-queue entry ``record`` creates, or None for types that create none."""
    rtype = record.type
    if rtype == _MESSAGE or rtype == _TX_MESSAGE:
        data_offset, data_size = record.log_offset, record.size
    elif rtype == _REF_MESSAGE:
        data_offset, data_size = record.ref_offset, record.ref_size
    else:
        return None
    return _new_tuple(QueueEntry, (
        record.topic,
        record.queue_id,
        record.queue_offset,
        data_offset,
        data_size,
        tag_hash(record.tags),
        record.store_time,
        record.key,
        record.log_offset,
    ))


#: A NamedTuple's own constructor is a Python function parsing its arguments; recovery
#: builds one entry per message, so :func:`queue_entry` makes the tuple directly.
_new_tuple = tuple.__new__


def tx_end(record: Record) -> TxEnd | None:
    """The transaction-end entry of a COMMIT or ROLLBACK record, else None."""
    rtype = record.type
    if rtype == _COMMIT:
        return _new_tuple(TxEnd, (record.tx_id, record.producer_group, True,
                                  record.log_offset))
    if rtype == _ROLLBACK:
        return _new_tuple(TxEnd, (record.tx_id, record.producer_group, False,
                                  record.log_offset))
    return None


def offset_entry(record: Record) -> OffsetEntry | None:
    """The consumer-offset entry of an OFFSET record, else None."""
    if record.type == _OFFSET:
        return OffsetEntry(record.producer_group, record.topic, record.queue_id,
                           record.queue_offset, record.log_offset)
    return None


def epoch_entry(record: Record) -> EpochEntry | None:
    """The epoch-history entry of an EPOCH record, else None."""
    if record.type == _EPOCH:
        return EpochEntry(record.queue_offset, record.log_offset, record.producer_group)
    return None


def topic_entry(record: Record) -> TopicEntry | None:
    """The topic-configuration entry of a TOPIC record, else None."""
    if record.type == _TOPIC:
        return TopicEntry(record.topic, (record.properties or {}).get(TOPIC_CONFIG_PROPERTY, ""),
                          record.log_offset)
    return None


def index_mark(record: Record) -> TxEnd | OffsetEntry | EpochEntry | TopicEntry | None:
    """What a record that takes no queue entry puts into the index: a transaction end, a
    consumer offset, a term or a topic's configuration (the dispatcher and recovery apply
    them with the queue entries)."""
    return tx_end(record) or offset_entry(record) or epoch_entry(record) or topic_entry(record)


def timer_changes(record: Record) -> tuple[TimerEntry | TimerFired, ...]:
    """What ``record`` changes in the pending timers, in order: a TIMER adds itself (after
    removing the TIMER it relocates, if it names one); a MESSAGE that names a TIMER removes
    it; anything else changes nothing."""
    rtype = record.type
    if rtype == _TIMER:
        added = TimerEntry(record.queue_offset, record.log_offset, record.size, record.topic)
        if record.ref_offset >= 0:
            return TimerFired(record.ref_offset), added
        return (added,)
    if rtype == _MESSAGE and record.ref_offset >= 0:
        return (TimerFired(record.ref_offset),)
    return ()


def index_items(record: Record) -> tuple[IndexItem, ...]:
    """Everything ``record`` puts into the index, in the order it is applied: its queue
    entry or its mark (transaction end, consumer offset, term), then its timer changes."""
    rtype = record.type
    if rtype == _MESSAGE:  # most records; a timer changes only when the message names one
        if record.ref_offset >= 0:
            return queue_entry(record), TimerFired(record.ref_offset)
        return (queue_entry(record),)
    if rtype == _TX_MESSAGE or rtype == _REF_MESSAGE:
        return (queue_entry(record),)
    if rtype == _TIMER:
        return timer_changes(record)
    if rtype == _PREPARE or rtype == _PRE_MESSAGE:  # half of a transaction's records
        return ()
    mark = index_mark(record)
    return () if mark is None else (mark,)


def sort_items(items: tuple[IndexItem, ...], entries: list[QueueEntry], ends: list[Mark],
               timers: list[TimerChange]) -> None:
    """File ``items`` into the three lists an index write takes: queue entries, marks,
    timer changes."""
    for item in items:
        if type(item) is QueueEntry:
            entries.append(item)
        elif type(item) is TimerEntry or type(item) is TimerFired:
            timers.append(item)
        else:
            ends.append(item)
