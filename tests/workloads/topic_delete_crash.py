"""Create topic ``orders``, fill it, then delete it with the crash harness armed, so the
process is SIGKILLed at the chosen I/O operation of the delete; acknowledges ``filled``
before arming and ``deleted`` if the delete returns.

``python -m tests.workloads.topic_delete_crash DATA_DIR ACK_PATH PARAMS_JSON``; ``config``
holds the BrokerConfig fields, ``arm`` the :meth:`CrashingIO.arm` keyword arguments.
"""

from __future__ import annotations

import sys

import fmq
from tests.crashkit import child_context
from tests.faults.workload import make_config

MESSAGES = 20


def main(argv: list[str]) -> None:
    child = child_context(argv)
    broker = fmq.Broker.open(child.broker_dir, make_config(child.params["config"]),
                             io=child.io)
    broker.topics.create("orders", queues=2)
    broker.send_batch([fmq.Message("orders", b"m%d" % i, key=f"k{i}")
                       for i in range(MESSAGES)])
    broker.wait_indexed()
    child.ack(op="filled")
    child.io.arm(**child.params["arm"])
    broker.topics.delete("orders", force=True)
    child.ack(op="deleted")
    broker.close()


if __name__ == "__main__":
    main(sys.argv[1:])
