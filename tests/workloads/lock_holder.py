"""Hold a data dir: open the broker, send five messages, wait for the index, then keep the
broker open (its lock held) until killed.

``python -m tests.workloads.lock_holder DATA_DIR ACK_PATH PARAMS_JSON``; ``config`` holds
the BrokerConfig fields. Acknowledges each send (``id``, ``offset``), then ``holding``.
"""

from __future__ import annotations

import sys
import time

import fmq
from tests.crashkit import child_context
from tests.faults.workload import body_for, make_config

#: Longer than any test waits: the parent SIGKILLs the holder when it is done.
HOLD_SECONDS = 120


def main(argv: list[str]) -> None:
    child = child_context(argv)
    ack = child.ack
    b = fmq.Broker.open(child.broker_dir, make_config(child.params["config"]))
    for i in range(5):
        r = b.send(fmq.Message("orders", body_for(f"h{i}", 500), queue_id=0))
        ack(op="send", id=f"h{i}", offset=r.offset)
    b.wait_indexed(30)  # the holder's own index writes must not race the snapshot
    ack(op="holding")
    time.sleep(HOLD_SECONDS)


if __name__ == "__main__":
    main(sys.argv[1:])
