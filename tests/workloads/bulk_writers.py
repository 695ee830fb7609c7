"""Producer threads and one transaction thread writing until killed, for the real power cut
(fault 5): nothing is armed, the broker uses the ordinary file I/O; the parent shuts the
file system down under it, then SIGKILLs it.

``python -m tests.workloads.bulk_writers DATA_DIR ACK_PATH PARAMS_JSON``; the parameters:
``config`` (BrokerConfig fields) and ``sizes`` (the arguments of
:func:`tests.faults.workload.bulk_messages`). The transaction thread prepares every
transaction and commits every third, rolls back every third, leaves the rest open.
"""

from __future__ import annotations

import sys
import threading

import fmq
from tests.crashkit import AckLog, child_context
from tests.faults.workload import bulk_messages, make_config, to_message


def producer(broker: fmq.Broker, ack: AckLog, messages: list[dict]) -> None:
    for m in messages:
        r = broker.send(to_message(m))
        ack(op="send", ids=[m["id"]], results=[[r.offset, r.queue_id, r.queue_offset]])


def transactions(broker: fmq.Broker, ack: AckLog, txs: dict[str, list[dict]]) -> None:
    for k, (tx, msgs) in enumerate(txs.items()):
        broker.transactions.prepare([to_message(m) for m in msgs], "shop", tx_id=tx)
        ack(op="prepare", tx=tx)
        if k % 3 == 2:
            broker.transactions.rollback(tx)
            ack(op="rollback", tx=tx)
        elif k % 3 == 0:
            broker.transactions.commit(tx)
            ack(op="commit", tx=tx)


def main(argv: list[str]) -> None:
    child = child_context(argv)
    ack = child.ack
    sends, txs = bulk_messages(*child.params["sizes"])
    broker = fmq.Broker.open(child.broker_dir, make_config(child.params["config"]))
    ack(op="opened")
    threads = [threading.Thread(target=producer, args=(broker, ack, sends[p])) for p in sends]
    threads.append(threading.Thread(target=transactions, args=(broker, ack, txs)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ack(op="done")


if __name__ == "__main__":
    main(sys.argv[1:])
