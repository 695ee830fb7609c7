"""Redo of the transaction records: rebuild the transaction manager's state from
PREPARE / PRE_MESSAGE / REF / TX / COMMIT / ROLLBACK records read back from the log (by
recovery, and by the offline transaction list)."""

from __future__ import annotations

from fmq.log.record import Record, RecordType
from fmq.tx.manager import OpenTransaction, PreMessage, TxManager
from fmq.tx.state import TxState


def redo_transaction_record(rec: Record, txm: TxManager) -> None:
    """Apply one record to ``txm``; records of no transaction are ignored. A transaction is
    its (producer group, id): every record of one names the group, except the REF and TX
    records of logs written before they did (their transaction is then found by id alone,
    unique across groups in those logs).

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
        key = (rec.producer_group, rec.tx_id)
        txm.finished.pop(key, None)
        tx = OpenTransaction(rec.tx_id, rec.producer_group, rec.log_offset, rec.store_time,
                             expected_messages=rec.ref_size)
        original = txm.open.get(key)
        if (rec.ref_offset >= 0 and original is not None
                and original.prepare_offset == rec.ref_offset):
            txm.relocating[key] = tx  # replaces the original once complete
        else:
            txm.relocating.pop(key, None)
            txm.register(tx)
    elif rtype == RecordType.PRE_MESSAGE:
        key = (rec.producer_group, rec.tx_id)
        copy = txm.relocating.get(key)
        tx = copy if copy is not None else txm.open.get(key)
        if tx is not None:
            tx.messages.append(PreMessage.of(rec))
            if copy is not None and copy.complete:
                del txm.relocating[key]
                txm.register(copy)
    elif rtype == RecordType.REF_MESSAGE or rtype == RecordType.TX_MESSAGE:
        tx = (txm.open.get((rec.producer_group, rec.tx_id)) if rec.producer_group
              else txm.open_by_id(rec.tx_id))
        if tx is not None:
            tx.state = TxState.COMMITTING
            target = rec.ref_offset
            for m in tx.messages:
                if m.offset == target:
                    m.queue_offset = rec.queue_offset
                    break
    elif rtype == RecordType.COMMIT or rtype == RecordType.ROLLBACK:
        key = (rec.producer_group, rec.tx_id)
        txm.relocating.pop(key, None)
        if key in txm.open:
            txm.finish(key, TxState.COMMIT if rtype == RecordType.COMMIT
                       else TxState.ROLLBACK)
