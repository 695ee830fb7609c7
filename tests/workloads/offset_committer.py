"""Commit consumer offsets for ever (the parent SIGKILLs it), acknowledging each one.

``python -m tests.workloads.offset_committer DATA_DIR ACK_PATH PARAMS_JSON``: sends
``PER_QUEUE`` messages to each of the four queues of topic ``t``, acknowledges
``{"op": "ready"}``, then commits: commit ``i`` moves group ``g<i % 3>``'s offset of queue
``(i // 3) % 4`` to :func:`commit_of` ``(i)[3]`` (rising per queue), acknowledged with
``{"op": "offset", "i": i}`` once ``commit_offset`` returned. One commit is in flight at
a time.
"""

from __future__ import annotations

import sys

import fmq
from tests.crashkit import child_context

PER_QUEUE = 400
GROUPS = 3
QUEUES = 4


def commit_of(i: int) -> tuple[str, str, int, int]:
    """(group, topic, queue id, next offset) of commit ``i``."""
    return f"g{i % GROUPS}", "t", (i // GROUPS) % QUEUES, 1 + i // (GROUPS * QUEUES)


def main(argv: list[str]) -> None:
    child = child_context(argv)
    cfg = fmq.BrokerConfig(segment_size=16 * 1024, max_message_size=4096, queues_per_topic=QUEUES,
                           checkpoint_interval_ms=50, retention_interval_ms=0)
    broker = fmq.Broker.open(child.broker_dir, cfg)
    for q in range(QUEUES):
        broker.send_batch([fmq.Message("t", b"x" * 20, queue_id=q) for _ in range(PER_QUEUE)])
    child.ack(op="ready")
    i = 0
    while True:
        group, topic, qid, off = commit_of(i)
        if off > PER_QUEUE:
            break
        broker.offsets.commit(group, [(topic, qid, off)])
        child.ack(op="offset", i=i)
        i += 1
    broker.close()


if __name__ == "__main__":
    main(sys.argv[1:])
