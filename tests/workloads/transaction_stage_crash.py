"""Send one plain message, then run a three-message transaction with the crash harness armed
in one phase of it (``prepare``, ``commit`` or ``rollback``): the stages of the crash
table in ``docs/transactions.md``, checked by ``tests/tx/test_crash_stages.py``.

``python -m tests.workloads.transaction_stage_crash DATA_DIR ACK_PATH PARAMS_JSON``; the
parameters: ``cfg`` (BrokerConfig fields), ``bodies`` (the transaction's message bodies),
``phase`` and ``arm`` (:meth:`CrashingIO.arm` keyword arguments). Acknowledges ``sent``,
``prepared`` and then ``committed`` or ``rolled back``; exits with status 3 if the armed
crash never came.
"""

from __future__ import annotations

import sys

import fmq
from tests.crashkit import child_context


def main(argv: list[str]) -> None:
    child = child_context(argv)
    params, io, ack = child.params, child.io, child.ack
    cfg = fmq.BrokerConfig(**params["cfg"])
    b = fmq.Broker.open(child.broker_dir, cfg, io=io)
    b.send(fmq.Message("t", b"plain-before"))
    ack(event="sent")
    msgs = [fmq.Message("t", body.encode(), key=f"k{i}")
            for i, body in enumerate(params["bodies"])]
    arm = params["arm"]
    if params["phase"] == "prepare":
        io.arm(**arm)
    tx = b.transactions.prepare(msgs, "g", tx_id="tx-1")
    ack(event="prepared")
    if params["phase"] == "commit":
        io.arm(**arm)
        b.transactions.commit(tx)
        ack(event="committed")
    elif params["phase"] == "rollback":
        io.arm(**arm)
        b.transactions.rollback(tx)
        ack(event="rolled back")
    sys.exit(3)  # the armed crash never came


if __name__ == "__main__":
    main(sys.argv[1:])
