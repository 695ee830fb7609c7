"""A retried PREPARE: recognising a PREPARE that repeats one already stored.

A PREPARE refused with NotEnoughReplicas, or whose answer was lost, is in the log all the
same; the producer's retry carries the same transaction id. When that id names a
transaction of the same producer group that is prepared and open, with the same messages,
the retry is the same request: it is answered with the first attempt's result (after the
same durability and replication wait) instead of DuplicateTransaction. So is a retry of a
transaction that was committed meanwhile (feedback asked the producer's checker), found
through the index's transaction ends and its records read back from the log. Any other
PREPARE under a used id is still refused (:meth:`fmq.tx.manager.TxManager.reserve`),
and a retry of a rolled-back one gets TransactionRolledBack (prepare again, never commit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import islice

from fmq.errors import FMQError
from fmq.log.log import Log
from fmq.log.reader import OpenSegmentSource
from fmq.log.record import Record, RecordType
from fmq.log.scanner import LogScanner
from fmq.message import Message
from fmq.tx.manager import OpenTransaction, PreMessage, TxManager

ReadRecord = Callable[[int, int], Record]
#: (committed?, log offset of the COMMIT or ROLLBACK record) of an ended transaction.
EndedTx = tuple[bool, int]


def find_retried_prepare(txm: TxManager, tx_id: str, producer_group: str,
                         messages: Sequence[Message], read_record: ReadRecord
                         ) -> tuple[OpenTransaction, int] | None:
    """The open, prepared transaction ``tx_id`` and the log offset its records end at, when
    this PREPARE repeats it; else None (lock held by the caller: the records it reads
    cannot move meanwhile)."""
    tx = txm.open.get((producer_group, tx_id))
    if (tx is None or not tx.prepared
            or len(tx.messages) != len(messages)):
        return None
    # The cheap fields first; the bodies are read back only when everything else matches.
    if not all(_same_fields(pre, m) for pre, m in zip(tx.messages, messages, strict=True)):
        return None
    for pre, m in zip(tx.messages, messages, strict=True):
        if not _same_content(read_record(pre.offset, pre.size), m):
            return None
    end = max([pre.offset + pre.size for pre in tx.messages] + [tx.prepare_offset])
    return tx, end


def find_committed_prepare(log_: Log, ended: EndedTx | None, tx_id: str, producer_group: str,
                           messages: Sequence[Message], max_record_size: int
                           ) -> tuple[OpenTransaction, int] | None:
    """For a transaction that ended with COMMIT (``ended``, from the index) whose PREPARE
    this one repeats: a prepared stand-in for it and the log offset its PRE_MESSAGEs end
    at. None when it did not commit, differs, or its records are gone (retention)."""
    if ended is None or not ended[0]:
        return None
    try:
        [commit] = _records(log_, ended[1], 1, max_record_size)
        if (commit.type != RecordType.COMMIT or commit.tx_id != tx_id
                or commit.producer_group != producer_group):
            return None
        # PREPARE and its PRE_MESSAGEs were appended together (fillers between segments).
        prepare, *pres = _records(log_, commit.ref_offset, len(messages) + 1, max_record_size)
    except (FMQError, OSError, ValueError):
        return None
    if (prepare.type != RecordType.PREPARE or prepare.tx_id != tx_id
            or prepare.producer_group != producer_group or prepare.ref_size != len(messages)
            or len(pres) != len(messages)):
        return None
    for rec, m in zip(pres, messages, strict=True):
        if (rec.type != RecordType.PRE_MESSAGE or rec.tx_id != tx_id or rec.topic != m.topic
                or rec.key != (m.key or None) or rec.tags != (m.tags or None)
                or (m.queue_id is not None and m.queue_id != rec.queue_id)
                or not _same_content(rec, m)):
            return None
    return (OpenTransaction(tx_id, producer_group, prepare.log_offset, prepare.store_time,
                            expected_messages=len(messages), prepared=True),
            pres[-1].log_offset + pres[-1].size)


def _records(log_: Log, offset: int, count: int, max_record_size: int) -> list[Record]:
    """Up to ``count`` records from ``offset`` on, fillers skipped."""
    with log_.lock:
        segments = list(log_.segments)
    scanner = LogScanner(source=OpenSegmentSource(segments), start_offset=offset,
                         max_record_size=max_record_size)
    return list(islice((r for r in scanner if r.type != RecordType.FILLER), count))


def _same_content(stored: Record, m: Message) -> bool:
    return (bytes(stored.body) == bytes(m.body)
            and (stored.properties or {}) == (m.properties or {}))


def _same_fields(pre: PreMessage, m: Message) -> bool:
    return (pre.topic == m.topic and pre.body_size == len(m.body)
            and pre.key == (m.key or None) and pre.tags == (m.tags or None)
            and (m.queue_id is None or m.queue_id == pre.queue_id))
