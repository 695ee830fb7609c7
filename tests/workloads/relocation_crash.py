"""Leave a transaction open, fill the log past the retention limit, then run retention armed
to crash while it relocates the transaction (its PREPARE and PRE_MESSAGEs rewritten at the
log head).

``python -m tests.workloads.relocation_crash DATA_DIR ACK_PATH PARAMS_JSON``; the
parameters: ``cfg`` (BrokerConfig fields), ``bodies`` (the transaction's message bodies),
``fill`` (how many 1 KiB plain messages) and ``arm`` (:meth:`CrashingIO.arm` keyword
arguments). Acknowledges ``prepared``, and ``retention done`` if the crash never came (then
it exits with status 3).
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
    bodies = [x.encode() for x in params["bodies"]]
    b.transactions.prepare([fmq.Message("pay", body) for body in bodies], "shop", tx_id="old")
    ack(event="prepared")
    for i in range(0, params["fill"], 100):
        b.send_batch([fmq.Message("fill", f"f{j}-".encode().ljust(1024, b"f"))
                      for j in range(i, i + 100)])
    b.wait_indexed()
    io.arm(**params["arm"])
    b.enforce_retention()
    ack(event="retention done")
    sys.exit(3)


if __name__ == "__main__":
    main(sys.argv[1:])
