"""Idempotent sends, plain traffic, a checkpoint, then SIGKILL: recovery must rebuild the
dedup window from the checkpoint it left (no clean close saved the window).

``python -m tests.workloads.dedup_checkpoint_then_die DATA_DIR ACK_PATH PARAMS_JSON``;
``config`` holds the BrokerConfig fields. Acknowledges each idempotent send's result and
the checkpoint's recovery offset.
"""

from __future__ import annotations

import sys

import fmq
from fmq.message import MESSAGE_ID_PROPERTY, PRODUCER_ID_PROPERTY, SEQUENCE_PROPERTY
from tests.crashkit import child_context, die
from tests.faults.workload import make_config


def main(argv: list[str]) -> None:
    child = child_context(argv)
    broker = fmq.Broker.open(child.broker_dir, make_config(child.params["config"]))
    for i in range(50):
        broker.send(fmq.Message("t", b"before %d" % i))
    for seq in range(3):
        r = broker.send(fmq.Message("t", b"idem %d" % seq, properties={
            PRODUCER_ID_PROPERTY: "p", SEQUENCE_PROPERTY: str(seq)}))
        child.ack(kind="seq", seq=seq, offset=r.offset, queue_id=r.queue_id,
                  queue_offset=r.queue_offset)
    r = broker.send(fmq.Message("t", b"keyed", properties={MESSAGE_ID_PROPERTY: "k"}))
    child.ack(kind="id", offset=r.offset, queue_id=r.queue_id, queue_offset=r.queue_offset)
    for i in range(300):
        broker.send(fmq.Message("t", b"after %d" % i))
    broker.wait_indexed(30)
    child.ack(kind="checkpoint", recovery_offset=broker.checkpoint().recovery_offset)
    die()


if __name__ == "__main__":
    main(sys.argv[1:])
