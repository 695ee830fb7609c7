"""What the client tests share: reading a whole topic back through a real server."""

from __future__ import annotations

from fmq.client import Client
from fmq.protocol import Op
from fmq.protocol.values import stored_from_wire

QUEUES = 4  # the server's default queues_per_topic


def read_topic(address: str, topic: str) -> dict[int, list]:
    """Every stored message of ``topic``, per queue in queue order (bounded pulls)."""
    out: dict[int, list] = {}
    with Client(address) as c:
        for qid in range(QUEUES):
            msgs: list = []
            for _ in range(10_000):
                got = c.call(Op.PULL, {"topic": topic, "queue_id": qid, "offset": len(msgs),
                                       "max_messages": 4096, "wait_ms": 0})["messages"]
                if not got:
                    break
                msgs.extend(stored_from_wire(m) for m in got)
            out[qid] = msgs
    return out
