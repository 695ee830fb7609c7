"""Redo of the transaction records: rebuild the transaction manager's state from
PREPARE / PRE_MESSAGE / REF / TX / COMMIT / ROLLBACK records read back from the log (by
recovery, and by the offline transaction list)."""

from __future__ import annotations

from fmq.log.record import Record, RecordType
from fmq.tx.manager import OpenTransaction, PreMessage, TxManager
from fmq.tx.state import TxState


def redo_transaction_record(rec: Record, txm: TxManager) -> None:
    """Apply one record to ``txm``; records of no transaction are ignored.

    ===============  ===========================================================
    PREPARE          open the transaction (a relocated copy waits in
                     ``txm.relocating`` until all its PRE_MESSAGEs are read)
    PRE_MESSAGE      attach to its transaction
    REF/TX_MESSAGE   mark its PRE_MESSAGE committed-into-the-queue (COMMITTING)
    COMMIT/ROLLBACK  close the transaction (unknown id: nothing to do)
    ===============  ===========================================================
    """
    rtype = rec.type
    if rtype == RecordType.PREPARE:
        txm.finished.pop(rec.tx_id, None)
        tx = OpenTransaction(rec.tx_id, rec.producer_group, rec.log_offset, rec.store_time,
                             expected_messages=rec.ref_size)
        original = txm.open.get(rec.tx_id)
        if (rec.ref_offset >= 0 and original is not None
                and original.prepare_offset == rec.ref_offset):
            txm.relocating[rec.tx_id] = tx  # replaces the original once complete
        else:
            txm.relocating.pop(rec.tx_id, None)
            txm.register(tx)
    elif rtype == RecordType.PRE_MESSAGE:
        copy = txm.relocating.get(rec.tx_id)
        tx = copy if copy is not None else txm.open.get(rec.tx_id)
        if tx is not None:
            tx.messages.append(PreMessage.of(rec))
            if copy is not None and copy.complete:
                del txm.relocating[rec.tx_id]
                txm.register(copy)
    elif rtype == RecordType.REF_MESSAGE or rtype == RecordType.TX_MESSAGE:
        tx = txm.open.get(rec.tx_id)
        if tx is not None:
            tx.state = TxState.COMMITTING
            target = rec.ref_offset
            for m in tx.messages:
                if m.offset == target:
                    m.queue_offset = rec.queue_offset
                    break
    elif rtype == RecordType.COMMIT or rtype == RecordType.ROLLBACK:
        txm.relocating.pop(rec.tx_id, None)
        if rec.tx_id in txm.open:
            txm.finish(rec.tx_id, TxState.COMMIT if rtype == RecordType.COMMIT
                       else TxState.ROLLBACK)
