"""Run a fault-test plan (:mod:`tests.faults.workload`) on a real broker, armed to crash.

``python -m tests.workloads.plan_writer DATA_DIR ACK_PATH PARAMS_JSON``; the parameters:
``config`` (BrokerConfig fields), ``plan``, and optionally ``arm`` (:meth:`CrashingIO.arm`
keyword arguments), ``trace`` (record every I/O operation), ``start`` (the first plan
step), ``ack_early`` (the deliberately broken writer of the control tests), ``close``
(default true) and ``die_at_end`` (SIGKILL after the plan, as a crash with nothing in flight).
"""

from __future__ import annotations

import sys

import fmq
from tests.crashkit import child_context, die
from tests.faults.workload import execute, make_config


def main(argv: list[str]) -> None:
    child = child_context(argv)
    params, io, ack = child.params, child.io, child.ack
    cfg = make_config(params["config"])
    if params.get("arm"):
        io.arm(**params["arm"])
    if params.get("trace"):
        io.trace = []
    broker = fmq.Broker.open(child.broker_dir, cfg, io=io)
    ack(op="opened")
    execute(broker, params["plan"], ack, params.get("start", 0), params.get("ack_early", False))
    ack(op="done", ops=io.total, trace=io.trace)
    if params.get("close", True):
        broker.close()
        ack(op="closed", ops=io.total, trace=io.trace)
    if params.get("die_at_end"):
        die()


if __name__ == "__main__":
    main(sys.argv[1:])
