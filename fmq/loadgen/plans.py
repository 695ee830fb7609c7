"""What one operation of each benchmark is: the request that starts it, and what an answer
means (a follow-up request, or the operation done with so many messages).

* ``SendPlan``: one SEND, or one SEND_BATCH of ``batch`` messages; answers are not decoded
  (the opcode and flags say it worked).
* ``TxPlan``: PREPARE of one message, then COMMIT of the returned transaction id; with
  ``commit_with_next``, the COMMIT is held and written in one write with the next
  operation's PREPARE (the lane's next operation starts at once), and the transaction is
  done when the COMMIT's answer arrives.
* ``PullPlan``: PULLs over a fixed set of queues from their start to the end they had when
  the run began (or, following, from their end on, with long polls), checking that queue
  offsets arrive without gaps or repeats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fmq.loadgen.frames import (
    FrameTemplate,
    prepare_template,
    send_batch_template,
    send_template,
)
from fmq.protocol import Op, decode_response, encode_request
from fmq.protocol.frame import Frame


class Plan:
    """One kind of operation. ``start`` returns the first request of a new operation, or
    None when this plan has nothing left to do; ``answer`` returns the next request of the
    same operation, or None with the messages and bytes the finished operation moved.

    ``holds_follow_ups``: the lane holds each follow-up request and writes it in one write
    with the next operation's first request, which it starts at once (the follow-up's
    operation no longer takes a place in the window); a follow-up nothing follows is
    written alone at the end of the read that produced it."""

    holds_follow_ups = False

    def start(self, request_id: int) -> bytes | None:
        raise NotImplementedError

    def answer(self, frame: Frame, request_id: int) -> tuple[bytes | None, int, int]:
        raise NotImplementedError

    def failed(self, request_id: int) -> None:
        """The operation whose last request had ``request_id`` got an error answer."""

    @property
    def gaps(self) -> int:
        """Messages that arrived out of order or after a missing one (consumers only)."""
        return 0


class SendPlan(Plan):
    def __init__(self, topic: str, size: int, batch: int) -> None:
        self._template: FrameTemplate = (send_batch_template(topic, size, batch) if batch > 1
                                         else send_template(topic, size))
        self._messages = max(1, batch)
        self._bytes = self._messages * size

    def start(self, request_id: int) -> bytes:
        return self._template.with_id(request_id)

    def answer(self, frame: Frame, request_id: int) -> tuple[None, int, int]:
        return None, self._messages, self._bytes


class TxPlan(Plan):
    def __init__(self, topic: str, size: int, producer_group: str,
                 commit_with_next: bool = False) -> None:
        self._template = prepare_template(topic, size, producer_group)
        self._group = producer_group
        self._size = size
        self.holds_follow_ups = commit_with_next

    def start(self, request_id: int) -> bytes:
        return self._template.with_id(request_id)

    def answer(self, frame: Frame, request_id: int) -> tuple[bytes | None, int, int]:
        if frame.opcode == Op.PREPARE:
            tx_id = decode_response(frame)["tx_id"]
            return encode_request(Op.COMMIT, request_id, {"producer_group": self._group,
                                                          "tx_id": tx_id}), 0, 0
        return None, 1, self._size


@dataclass(eq=False)
class QueueCursor:
    """One queue a consumer reads: from ``next_offset`` up to ``end_offset`` (excluded)."""

    topic: str
    queue_id: int
    next_offset: int
    end_offset: int
    gaps: int = 0


#: Long-poll wait of a following consumer: it ends at most this late after the deadline.
FOLLOW_WAIT_MS = 100


@dataclass
class PullPlan(Plan):
    cursors: list[QueueCursor]
    max_messages: int = 256
    follow: bool = False
    _turn: int = field(default=0, repr=False)
    _pending: dict[int, QueueCursor] = field(default_factory=dict, repr=False)

    def start(self, request_id: int) -> bytes | None:
        live = [c for c in self.cursors if c.next_offset < c.end_offset and
                c not in self._pending.values()]
        if not live:
            return None
        cursor = live[self._turn % len(live)]
        self._turn += 1
        self._pending[request_id] = cursor
        return encode_request(Op.PULL, request_id, {
            "topic": cursor.topic, "queue_id": cursor.queue_id, "offset": cursor.next_offset,
            "max_messages": min(self.max_messages, cursor.end_offset - cursor.next_offset),
            "wait_ms": FOLLOW_WAIT_MS if self.follow else 0})

    def answer(self, frame: Frame, request_id: int) -> tuple[None, int, int]:
        cursor = self._pending.pop(frame.request_id)
        messages = decode_response(frame)["messages"]
        count = size = 0
        for m in messages:
            if m["queue_offset"] >= cursor.end_offset:
                break
            if m["queue_offset"] != cursor.next_offset:
                cursor.gaps += 1
            cursor.next_offset = m["queue_offset"] + 1
            count += 1
            size += len(m["body"])
        return None, count, size

    def failed(self, request_id: int) -> None:
        """An error answer: the queue is read again from the same offset."""
        self._pending.pop(request_id, None)

    @property
    def gaps(self) -> int:
        return sum(c.gaps for c in self.cursors)
