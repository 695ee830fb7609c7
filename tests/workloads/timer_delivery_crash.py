"""Schedule timers, then die (SIGKILL from the crashing I/O) while the timer service delivers
them, or, with ``fill``, while retention moves them out of the segments it deletes.

``python -m tests.workloads.timer_delivery_crash DATA_DIR ACK_PATH PARAMS_JSON``; the
parameters: ``cfg`` (BrokerConfig fields; a small ``timer_batch`` makes many delivery
rounds), ``count`` (timers, all due ``due_in_ms`` after they are stored), ``fill`` (1 KiB
plain messages sent after them, then retention runs; 0: none) and ``arm``
(:meth:`CrashingIO.arm` keyword arguments, armed once every write but the timers' own
delivery or relocation is done). Acknowledges ``scheduled``, and ``delivered`` if the
crash never came (then it exits with status 3).
"""

from __future__ import annotations

import sys
import time

import fmq
from fmq.log.placement import now_ms
from tests.crashkit import child_context


def main(argv: list[str]) -> None:
    child = child_context(argv)
    params, io, ack = child.params, child.io, child.ack
    b = fmq.Broker.open(child.broker_dir, fmq.BrokerConfig(**params["cfg"]), io=io)
    due = now_ms() + params["due_in_ms"]
    b._timers.schedule([fmq.Message("t", b"timer-%d" % i) for i in range(params["count"])],
                      due)
    for _ in range(params.get("fill", 0)):
        b.send(fmq.Message("u", b"." * 1024))
    b.wait_indexed()
    io.arm(**params["arm"])
    ack(event="scheduled")
    if params.get("fill"):
        b.enforce_retention()
    deadline = time.monotonic() + 60
    while b._timers.pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    ack(event="delivered")
    sys.exit(3)


if __name__ == "__main__":
    main(sys.argv[1:])
