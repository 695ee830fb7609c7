"""Recover a data dir with the crash harness armed, so that recovery itself is SIGKILLed at
the chosen I/O operation; acknowledges ``recovered`` (with the transactions it rolled
forward) if it completes.

``python -m tests.workloads.armed_recovery DATA_DIR ACK_PATH PARAMS_JSON``; ``config``
holds the BrokerConfig fields, ``arm`` the :meth:`CrashingIO.arm` keyword arguments.
"""

from __future__ import annotations

import sys

import fmq
from tests.crashkit import child_context
from tests.faults.workload import make_config


def main(argv: list[str]) -> None:
    child = child_context(argv)
    child.io.arm(**child.params["arm"])
    broker = fmq.Broker.open(child.broker_dir, make_config(child.params["config"]), io=child.io)
    broker.wait_indexed(30)
    child.ack(op="recovered", rolled=broker.recovery.rolled_forward)


if __name__ == "__main__":
    main(sys.argv[1:])
