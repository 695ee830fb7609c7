"""A transactional producer that prepares one message and then hangs in its local
transaction, to be killed there: after prepare, before commit or rollback.

``python -m tests.workloads.doomed_tx_producer ADDRESS BODY``: prints the transaction id
once the prepare is acknowledged. It uses only the client (group ``shop``, topic
``orders``) and never answers a check-back (feedback off).
"""

from __future__ import annotations

import sys
import time

import fmq
from fmq.client import TransactionProducer

#: Longer than any test waits: the parent kills the producer once it printed the id.
HANG_SECONDS = 120


def main(argv: list[str]) -> None:
    address, body = argv[0], argv[1].encode()
    p = TransactionProducer(address, "shop", lambda u: fmq.TxState.UNKNOWN, feedback=False)

    def local(tx_id: str, arg: object) -> None:
        print(tx_id, flush=True)
        time.sleep(HANG_SECONDS)  # killed here: after prepare, before commit/rollback

    p.send_in_transaction(fmq.Message("orders", body), local)


if __name__ == "__main__":
    main(sys.argv[1:])
