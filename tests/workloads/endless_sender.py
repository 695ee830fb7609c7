"""Send plain messages for ever (the parent SIGKILLs it), with checkpoints every 50 ms,
recording each acknowledged send.

``python -m tests.workloads.endless_sender DATA_DIR ACK_PATH``: each acknowledgement is
one JSON line ``[offset, queue_id, queue_offset, body]``, fsync'd before the next send.
Message ``i`` goes to topic ``a`` (odd) or ``b`` (even) with key ``k<i mod 7>``.
"""

from __future__ import annotations

import json
import os
import sys

import fmq


def main(argv: list[str]) -> None:
    data_dir, ack_path = argv
    cfg = fmq.BrokerConfig(segment_size=16 * 1024, max_message_size=4096,
                           checkpoint_interval_ms=50, retention_interval_ms=0)
    b = fmq.Broker.open(data_dir, cfg)
    i = 0
    with open(ack_path, "a") as acks:
        while True:
            body = f"msg-{i}-".encode() * 10
            r = b.send(fmq.Message("a" if i % 2 else "b", body, key=f"k{i % 7}"))
            acks.write(json.dumps([r.offset, r.queue_id, r.queue_offset, body.decode()]) + "\n")
            acks.flush()
            os.fsync(acks.fileno())
            i += 1


if __name__ == "__main__":
    main(sys.argv[1:])
