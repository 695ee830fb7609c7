"""Producer threads and transaction threads sharing the log's group commit, armed to crash
(fault 6).

``python -m tests.workloads.group_commit_writers DATA_DIR ACK_PATH PARAMS_JSON``; the
parameters: ``config`` (BrokerConfig fields), ``arm`` (:meth:`CrashingIO.arm` keyword
arguments), ``sends`` (producer number -> its messages, sent one at a time), ``txs``
(transaction id ``x<thread>.<k>`` -> its messages), ``tx_threads`` and ``tx_per_thread``.
The transaction threads each prepare, then commit (or, every third, roll back) their transactions.
Every thread waits at one barrier, so they all start writing together.
"""

from __future__ import annotations

import sys
import threading

import fmq
from tests.crashkit import AckLog, child_context
from tests.faults.workload import make_config, to_message


def producer(broker: fmq.Broker, ack: AckLog, start: threading.Barrier,
             messages: list[dict]) -> None:
    start.wait()
    for m in messages:
        r = broker.send(to_message(m))
        ack(op="send", ids=[m["id"]], results=[[r.offset, r.queue_id, r.queue_offset]])


def transactions(broker: fmq.Broker, ack: AckLog, start: threading.Barrier, txs: dict,
                 thread: int, tx_per_thread: int) -> None:
    start.wait()
    for k in range(tx_per_thread):
        tx = f"x{thread}.{k}"
        broker.transactions.prepare([to_message(m) for m in txs[tx]], "shop", tx_id=tx)
        ack(op="prepare", tx=tx)
        if k % 3 == 2:
            broker.transactions.rollback(tx)
            ack(op="rollback", tx=tx)
        else:
            broker.transactions.commit(tx)
            ack(op="commit", tx=tx)


def main(argv: list[str]) -> None:
    child = child_context(argv)
    params, io, ack = child.params, child.io, child.ack
    sends = {int(p): ms for p, ms in params["sends"].items()}
    io.arm(**params["arm"])
    broker = fmq.Broker.open(child.broker_dir, make_config(params["config"]), io=io)
    tx_threads = params["tx_threads"]
    start = threading.Barrier(len(sends) + tx_threads)
    threads = [threading.Thread(target=producer, args=(broker, ack, start, sends[p]))
               for p in sends]
    threads += [threading.Thread(target=transactions,
                                 args=(broker, ack, start, params["txs"], t,
                                       params["tx_per_thread"]))
                for t in range(tx_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    ack(op="done", counts=io.counts)
    broker.close()


if __name__ == "__main__":
    main(sys.argv[1:])
