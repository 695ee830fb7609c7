"""Relocation: retention's rewrite of an open, prepared transaction at the log head (a new
PREPARE naming the current one, then copies of its PRE_MESSAGEs), so that an abandoned
transaction cannot keep an old segment, and with it the whole log, from being deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fmq.log.log import Log
from fmq.log.record import Record, RecordType
from fmq.tx.manager import OpenTransaction, PreMessage, TxManager
from fmq.tx.state import TxState

logger = logging.getLogger("fmq.broker")  # the broker's lines keep one logger name


class TxRelocator:
    """Moves open transactions to the log head; counts how many it moved."""

    def __init__(self, *, log_: Log, txm: TxManager,
                 read_record: Callable[[int, int], Record]) -> None:
        self.log = log_
        self.tx = txm
        self.read_record = read_record  # a stored record, by offset and size
        self.relocations = 0  # open transactions rewritten at the log head

    def relocate(self, tx: OpenTransaction) -> bool:
        """Rewrite an open transaction at the log head: a PREPARE whose ``ref_offset`` names
        the current one, then copies of its PRE_MESSAGEs, in one group commit. Recovery
        takes the copy only once it is complete, so a crash at any point leaves one whole
        copy; the in-memory transaction switches to the copy once it is durable. False when
        it cannot move now (being ended, committing, or not yet prepared)."""
        if not tx.busy.acquire(blocking=False):
            return False  # being committed or rolled back right now
        try:
            with self.tx.lock:
                if (self.tx.open.get(tx.key) is not tx or tx.state != TxState.OPEN
                        or not tx.prepared or tx.referenced):
                    return False
                messages = list(tx.messages)
            pres = [self.read_record(m.offset, m.size) for m in messages]
            log_ = self.log
            with log_.lock:
                prep = Record(RecordType.PREPARE, store_time=tx.store_time, tx_id=tx.tx_id,
                              producer_group=tx.producer_group, ref_size=len(pres),
                              ref_offset=tx.prepare_offset)
                log_.append_locked(prep)
                moved = []
                for pre in pres:
                    rec = Record(RecordType.PRE_MESSAGE, store_time=pre.store_time,
                                 queue_id=pre.queue_id, topic=pre.topic, tx_id=tx.tx_id,
                                 producer_group=tx.producer_group, key=pre.key, tags=pre.tags,
                                 properties=pre.properties, body=bytes(pre.body))
                    log_.append_locked(rec)
                    moved.append(PreMessage.of(rec))
                end = log_.next_offset
            log_.wait_durable(end, sync=True)
            old_offset = tx.prepare_offset
            with self.tx.lock:
                tx.prepare_offset = prep.log_offset
                tx.messages = moved
            self.relocations += 1
            logger.info("retention relocated open transaction %r (%d messages) from %d to %d",
                        tx.tx_id, len(moved), old_offset, prep.log_offset)
            return True
        finally:
            tx.busy.release()
