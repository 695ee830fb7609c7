"""Recover a data dir (open the broker, wait for the index), then SIGKILL: the first of the
two recoveries of the "recover twice" check, ending as a crash instead of a close.

``python -m tests.workloads.recover_and_die DATA_DIR ACK_PATH PARAMS_JSON``; ``config``
holds the BrokerConfig fields. The broker uses the ordinary file I/O (nothing is armed).
"""

from __future__ import annotations

import sys

import fmq
from tests.crashkit import child_context, die
from tests.faults.workload import make_config


def main(argv: list[str]) -> None:
    child = child_context(argv)
    broker = fmq.Broker.open(child.broker_dir, make_config(child.params["config"]))
    broker.wait_indexed(30)
    die()


if __name__ == "__main__":
    main(sys.argv[1:])
