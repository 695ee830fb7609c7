"""The few reads the topic source makes of a running server, over the Python client:
how many queues a topic has, a queue's consumable range, the offset for a time, and a
pull of one queue range. Everything here reads what the server's index made consumable,
so an open or rolled-back transaction's messages are never seen."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from fmq.client import Client
from fmq.errors import FMQError
from fmq.message import StoredMessage
from fmq.protocol import Op
from fmq.protocol.values import stored_from_wire

#: Messages asked for per PULL (the server answers at most 4096 and at most its
#: ``max_reply_size`` bytes).
PULL_MESSAGES = 1024


class TopicDataLost(FMQError):
    """A queue range planned from the server's own offsets could not be read back."""


class QueueClient(Client):
    """A plain client (no consumer group, no committed offsets): the topic source keeps
    its positions in Spark's checkpoint instead."""

    def __init__(self, servers: str | Sequence[str], **options: Any) -> None:
        super().__init__(servers, **options)
        self._queues: int | None = None

    def queues_per_topic(self) -> int:
        """The server's number of queues per topic (every topic has them all)."""
        if self._queues is None:
            self._queues = int(self.ping()["queues_per_topic"])
        return self._queues

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min offset, next offset): the queue's consumable messages now."""
        resp = self.call(Op.QUEUE_RANGE, {"topic": topic, "queue_id": queue_id})
        return int(resp["min_offset"]), int(resp["next_offset"])

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (the next offset
        when none is)."""
        resp = self.call(Op.OFFSET_FOR_TIME, {"topic": topic, "queue_id": queue_id,
                                              "timestamp_ms": timestamp_ms})
        return int(resp["offset"])

    def read_range(self, topic: str, queue_id: int, start: int, end: int
                   ) -> Iterator[list[StoredMessage]]:
        """The messages of queue offsets ``start`` .. ``end - 1``, in answers of up to
        :data:`PULL_MESSAGES`. Offsets retention deleted meanwhile are skipped (the
        server's ``min_offset`` moved past them); a range the server no longer has at all
        raises :class:`TopicDataLost`."""
        offset = start
        while offset < end:
            resp = self.call(Op.PULL, {"topic": topic, "queue_id": queue_id, "offset": offset,
                                       "max_messages": min(PULL_MESSAGES, end - offset),
                                       "wait_ms": 0})
            msgs = [m for m in (stored_from_wire(w) for w in resp["messages"])
                    if m.queue_offset < end]
            if msgs:
                yield msgs
                offset = msgs[-1].queue_offset + 1
            elif resp["min_offset"] > offset:
                offset = resp["min_offset"]  # retention deleted the rest of the range
            else:
                raise TopicDataLost(
                    f"queue {queue_id} of topic {topic!r} has no message at offset {offset} "
                    f"although its range reached {end} when this batch was planned "
                    f"(the server now ends it at {resp['next_offset']}): the server's data "
                    f"was replaced or cut. Start the query again on a new checkpoint")

