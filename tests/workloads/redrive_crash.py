"""Dead-letter a group's messages, then die (SIGKILL from the crashing I/O) while a redrive
sends them back to the group's retry topic.

``python -m tests.workloads.redrive_crash DATA_DIR ACK_PATH PARAMS_JSON``; the parameters:
``cfg`` (BrokerConfig fields: a long ``timer_poll_ms`` keeps the timer service from writing,
so the workload's own writes are the only ones counted), ``count`` (dead letters of group
``g``) and ``arm`` (:meth:`CrashingIO.arm` keyword arguments, armed once the dead letters
are indexed). Acknowledges ``dead``, and ``redriven`` if the crash never came (then it
exits with status 3).
"""

from __future__ import annotations

import sys

import fmq
from fmq.log.placement import now_ms
from tests.crashkit import child_context


def main(argv: list[str]) -> None:
    child = child_context(argv)
    params, io, ack = child.params, child.io, child.ack
    b = fmq.Broker.open(child.broker_dir, fmq.BrokerConfig(**params["cfg"]), io=io)
    sent = [b.send(fmq.Message("orders", b"dead-%d" % i, queue_id=0))
            for i in range(params["count"])]
    b.wait_indexed()
    for r in sent:  # max_reconsume_times 0: the first failure is a dead letter
        b.deliveries.nack("g", "orders", r.queue_id, r.queue_offset)
    while b._timers.deliver_due(now_ms()):
        pass
    b.wait_indexed()
    io.arm(**params["arm"])
    ack(event="dead")
    ack(event="redriven", count=b.deliveries.redrive("g"))
    sys.exit(3)


if __name__ == "__main__":
    main(sys.argv[1:])
