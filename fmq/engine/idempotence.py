"""The send path of idempotent sends: messages carrying a producer id and sequence, or a
message id (:data:`fmq.message.PRODUCER_ID_PROPERTY`...), are checked against the dedup
window under the log lock; a duplicate is answered with the original's result and not
stored again, the others are placed as :func:`fmq.engine.queues.place_messages` places
them and remembered: the window takes each placed record as recovery and followers take it
(:meth:`~fmq.dedup.DedupWindow.remember`), and looks a send up by the same keys
(:func:`~fmq.dedup.send_keys`).

On a server with users, :func:`bind_principal` writes the sender's principal into each
idempotent send before it is placed, so the keys (and the stored record) hold it.

Other sends never come here (:func:`has_dedup` is the one test the plain path pays). The
check is a dict lookup per message; nothing is read from disk and no fsync is added. A
duplicate of a message not yet durable is answered once the log is durable up to the end
offset returned, which lies past the original.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fmq.config import BrokerConfig
from fmq.dedup import DedupWindow, send_keys
from fmq.errors import FMQError
from fmq.log.log import Log
from fmq.log.placement import now_ms, reserve_segments
from fmq.log.record import check_fits
from fmq.message import (
    MESSAGE_ID_PROPERTY,
    PRINCIPAL_PROPERTY,
    PRODUCER_ID_PROPERTY,
    Message,
    SendResult,
    check_message,
)

from .queues import Queues, append_message_locked

#: What the placement decided for one message: placed (None), the result of an earlier
#: send, or the index of the message of this batch that stores it.
Decision = SendResult | int | object | None
_REFUSED = object()  # the message's request was refused


def has_dedup(messages: Sequence[Message]) -> bool:
    """Whether any message asks for deduplication: the one rule (the broker decides by it
    which send path a batch takes, and :func:`bind_principal` which messages it binds)."""
    for m in messages:
        p = m.properties
        if p and (PRODUCER_ID_PROPERTY in p or MESSAGE_ID_PROPERTY in p):
            return True
    return False


def bind_principal(messages: Sequence[Message], principal: str, config: BrokerConfig,
                   queue_count: Callable[[str], int]) -> list[Message]:
    """``messages`` (checked) with ``principal``, the user who sent them, written into each
    idempotent send: its dedup keys are that user's alone. The properties grow, so those
    messages are checked again (as the broker's own: the property is the broker's)."""
    out = []
    for m in messages:
        if has_dedup((m,)):
            m = Message(m.topic, m.body, m.key, m.tags,
                        {**m.properties, PRINCIPAL_PROPERTY: principal}, m.queue_id)
            check_message(m, config.max_message_size, queue_count, internal=True)
            check_fits(m, config.segment_size)
        out.append(m)
    return out


class Idempotence:
    """Places batches with idempotent sends; holds the broker's dedup window."""

    def __init__(self, log_: Log, queues: Queues, window: DedupWindow,
                 check_open: Callable[[], None], admit: Callable[[], None]) -> None:
        self.log = log_
        self.queues = queues
        self.window = window
        self._check_open = check_open  # the broker's checks before any placing
        self._admit = admit
        #: Resends answered with their original's result, by topic, since the broker opened.
        self.duplicates_by_topic: dict[str, int] = {}

    def place_batch(self, messages: Sequence[Message]) -> tuple[list[SendResult], int]:
        """One request, all or none: its results (a duplicate's is the original's) and the
        log offset to wait for; raises the error that refused it."""
        results, end, refused = self.place_requests(messages, [len(messages)])
        if refused:
            raise refused[0]
        return results, end

    def place_requests(self, messages: Sequence[Message], sizes: Sequence[int]
                       ) -> tuple[list[SendResult], int, dict[int, FMQError]]:
        """The messages of several requests (``sizes``: their message counts, in order),
        each request all or none. Returns the results of the requests placed, in order,
        the log offset to wait for, and the error of each request refused, by its index
        (none of its messages is stored)."""
        self._check_open()
        self._admit()
        window = self.window
        store_time = now_ms()
        with self.log.lock:
            plan: list[Decision] = []
            refused: dict[int, FMQError] = {}
            claimed: dict[tuple, int] = {}  # dedup key -> index of the message storing it
            pos = 0
            for request, n in enumerate(sizes):
                mine: dict[tuple, int] = {}
                try:
                    decisions = [self._decide(messages[i], i, claimed, mine, store_time)
                                 for i in range(pos, pos + n)]
                except FMQError as exc:
                    refused[request] = exc
                    decisions = [_REFUSED] * n
                claimed.update(mine)
                plan += decisions
                pos += n
            reserve_segments(self.log, [m for m, d in zip(messages, plan, strict=True)
                                        if d is None])
            placed = self._place(messages, plan, store_time)
            results = []
            for i, d in enumerate(plan):
                if d is None:
                    results.append(placed[i])
                elif d is not _REFUSED:
                    window.duplicates += 1
                    topic = messages[i].topic
                    self.duplicates_by_topic[topic] = self.duplicates_by_topic.get(topic, 0) + 1
                    results.append(placed[d] if isinstance(d, int) else d)
            return results, self.log.next_offset, refused

    def _decide(self, m: Message, i: int, claimed: dict[tuple, int], mine: dict[tuple, int],
                now: int) -> Decision:
        seq_key, id_key = send_keys(m.topic, m.properties or {})
        keys: list[tuple] = []
        if seq_key is not None:
            key: tuple = ("seq", *seq_key)
            earlier = mine.get(key, claimed.get(key))
            if earlier is not None:
                return earlier
            stored = self.window.lookup_sequence(seq_key, now)
            if stored is not None:
                return stored
            keys.append(key)
        if id_key is not None:
            key = ("id", *id_key)
            earlier = mine.get(key, claimed.get(key))
            if earlier is not None:
                return earlier
            stored = self.window.lookup_message_id(id_key, now)
            if stored is not None:
                return stored
            keys.append(key)
        for key in keys:
            mine[key] = i
        return None

    def _place(self, messages: Sequence[Message], plan: list[Decision], store_time: int
               ) -> dict[int, SendResult]:
        """Place the messages the plan stores (log lock held, segments reserved), as
        :func:`~fmq.engine.queues.place_messages` does, and remember each."""
        log_, queues, window = self.log, self.queues, self.window
        placed = {}
        for i, d in enumerate(plan):
            if d is not None:
                continue
            rec = append_message_locked(log_, queues, messages[i], store_time)
            placed[i] = SendResult(rec.log_offset, rec.queue_id, rec.queue_offset)
            window.remember(rec)
        return placed
