"""Queues of the write path: how many queues each topic has, which queue a message goes to,
the next queue offset of every queue, and the plain send path that places MESSAGE records.
The rest of FMQ imports them from :mod:`fmq.engine.queues`, which runs this module compiled
where setup.py built it (``fmq.engine._queue_placement_c``).

Queue offsets are assigned under the log lock, so queue order is log order.

The queue count of a topic is its own setting (its latest TOPIC record, ``fmq topic
create|alter``: grow only), else ``queues_per_topic``, and never less than the data needs:
a topic has ``max(that, 1 + the highest queue id it holds records or open transactional
messages in)`` queues. Lowering ``queues_per_topic`` therefore applies only to new topics
(and to queues that never held anything), and no configuration can make a stored message
unreachable. The queue ids come from the index's queue marks, which recovery and the Spark
rebuild derive from the log; the topic settings from the index's topic table.

:meth:`Queues.check_topic` is the one rule of which topics take a message: a topic created
and not deleted, else (``auto_create_topics``) any topic never deleted; and a message no
larger than the topic's own ``max_message_size``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from fmq.config import BrokerConfig
from fmq.errors import MessageTooLarge, UnknownTopic
from fmq.index.entry_types import QueueEntry
from fmq.log.log import Log
from fmq.log.placement import now_ms, reserve_segments
from fmq.log.record import HEADER_SIZE, RECORD_BOUND, Record, RecordType, check_fits
from fmq.message import (
    MAX_PROPERTIES,
    Message,
    PackedResults,
    SendResult,
    check_fields,
    check_message,
    is_internal_topic,
    new_send_result,
    valid_topic_name,
)
from fmq.topic_config import TopicConfig
from fmq.topic_route import key_slot


class Queues:
    """Queue choice and queue-offset allocation (the log lock held by the caller)."""

    def __init__(self, queues_per_topic: int, queue_next: dict[tuple[str, int], int],
                 pending: Iterable[tuple[str, int]] = (),
                 topics: Iterable[TopicConfig] = (), auto_create: bool = True) -> None:
        """``queue_next``: the next offset of every queue the log holds records of;
        ``pending``: the (topic, queue id) of every open transactional message;
        ``topics``: the topics' own settings (the index's topic table)."""
        self.queues_per_topic = queues_per_topic
        self.auto_create = auto_create
        #: Each topic's settings from its latest TOPIC record (changed under the log lock).
        self.topics: dict[str, TopicConfig] = {t.name: t for t in topics}
        self._next = queue_next
        self._round_robin: dict[str, int] = {}
        self._stored_counts = stored_queue_counts(list(queue_next) + list(pending))
        #: Messages and body bytes placed per topic since the broker opened (metrics).
        self.messages_in: dict[str, int] = {}
        self.bytes_in: dict[str, int] = {}

    def queue_count(self, topic: str) -> int:
        """How many queues ``topic`` has (see the module docstring)."""
        own = self.topics.get(topic)
        return max(self.queues_per_topic if own is None else own.queues,
                   self._stored_counts.get(topic, 0))

    def check_topic(self, m: Message) -> None:
        """Refuse ``m`` unless its topic takes it (see the module docstring). The broker's
        own topics (retries, dead letters) always do."""
        self.check_topic_takes(m.topic, len(m.body))

    def check_topic_takes(self, topic: str, size: int) -> None:
        """:meth:`check_topic` of a message to ``topic`` with a body of ``size`` bytes."""
        own = self.topics.get(topic)
        if own is None:
            if not self.auto_create and not is_internal_topic(topic):
                raise UnknownTopic(topic)
            return
        if own.deleted:
            raise UnknownTopic(topic)
        limit = own.max_message_size
        if limit is not None and size > limit:
            raise MessageTooLarge(
                f"message body is {size} bytes, the limit of topic {topic!r} "
                f"(its max_message_size) is {limit}; split the payload or raise the limit "
                f"with: fmq topic alter {topic} --max-message-size SIZE")

    def topic_names(self) -> set[str]:
        """Every topic with data or settings (call under the log lock: sends add queues)."""
        return {t for t, _q in self._next} | set(self._stored_counts) | set(self.topics)

    def stored_counts(self) -> dict[str, int]:
        """The queue count each topic's stored data needs (topics with data only)."""
        return dict(self._stored_counts)

    def pick_queue(self, message: Message) -> int:
        """The message's own queue id, else its key's hash, else round robin per topic."""
        return self._pick(message, self.queue_count(message.topic))

    def _pick(self, message: Message, n: int) -> int:
        """:meth:`pick_queue` of a topic of ``n`` queues."""
        if message.queue_id is not None:
            return message.queue_id
        if message.key:
            return key_slot(message.key, n)
        rr = self._round_robin.get(message.topic, 0)
        self._round_robin[message.topic] = rr + 1
        return rr % n

    def next_offset(self, topic: str, queue_id: int) -> int:
        """The queue offset the next record of the queue gets."""
        return self._next.get((topic, queue_id), 0)

    def plan(self, messages: Sequence[Message]) -> tuple[list[int], list[int]]:
        """The queue id and queue offset each of ``messages`` gets when they are placed in
        this order; nothing is taken until :meth:`advance_run`."""
        queue_ids: list[int] = []
        queue_offsets: list[int] = []
        taken: dict[tuple[str, int], int] = {}
        counts: dict[str, int] = {}  # a batch does not change a topic's queue count
        stored = self._next
        for m in messages:
            topic = m.topic
            n = counts.get(topic)
            if n is None:
                n = counts[topic] = self.queue_count(topic)
            qid = self._pick(m, n)
            q = (topic, qid)
            qoff = taken.get(q)
            if qoff is None:
                qoff = stored.get(q, 0)
            taken[q] = qoff + 1
            queue_ids.append(qid)
            queue_offsets.append(qoff)
        return queue_ids, queue_offsets

    def advance_run(self, messages: Sequence[Message], queue_ids: list[int],
                    queue_offsets: list[int], count: int) -> None:
        """The first ``count`` positions of a :meth:`plan` are taken (their records are
        placed)."""
        stored = self._next
        added: dict[str, list[int]] = {}  # per topic: messages, body bytes
        for i in range(count):
            m = messages[i]
            topic = m.topic
            stored[(topic, queue_ids[i])] = queue_offsets[i] + 1
            sums = added.get(topic)
            if sums is None:
                sums = added[topic] = [0, 0]
            sums[0] += 1
            sums[1] += len(m.body)
        for topic, (n, size) in added.items():
            self.messages_in[topic] = self.messages_in.get(topic, 0) + n
            self.bytes_in[topic] = self.bytes_in.get(topic, 0) + size

    def advance(self, topic: str, queue_id: int, queue_offset: int, body_bytes: int = 0) -> None:
        """``queue_offset`` is taken (its record is placed)."""
        self._next[(topic, queue_id)] = queue_offset + 1
        self.messages_in[topic] = self.messages_in.get(topic, 0) + 1
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + body_bytes


def stored_queue_counts(queues: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Per topic, 1 + the highest queue id among ``queues``."""
    counts: dict[str, int] = {}
    for topic, qid in queues:
        if counts.get(topic, 0) <= qid:
            counts[topic] = qid + 1
    return counts


def check_messages(messages: Sequence[Message], config: BrokerConfig, queues: Queues,
                   largest: int = -1) -> None:
    """Raise the typed error of the first message that cannot be stored as it is, as
    :func:`check_messages_each` (the reference) does, checking what the batch's messages
    share once (:func:`batch_passes`). Where that does not prove that every message
    passes, the reference runs and names the first message it refuses.

    ``largest``: what the caller's decoder knows of the batch (the Kafka door's, from
    ``fmq.server.kafka.record_messages.plain_largest``): the index of the first message
    with the largest body, when every message has the topic and queue id of that one, a
    body of bytes, and a key, tags and properties that pass ``check_message``'s rules;
    else -1."""
    try:
        passed = batch_passes(messages, config, queues, largest)
    except Exception:  # noqa: BLE001 - not proven: the reference says what is wrong, if anything
        passed = False
    if not passed:
        check_messages_each(messages, config, queues)


#: A message record that passed ``check_message`` takes at most its body and this (its
#: topic, key, tags and properties at their limits: fmq/log/record/sizes.py), plus the end
#: filler a segment keeps room for: ``check_fits`` passes each message whose body is no
#: larger than ``segment_size`` minus this.
FIT_BOUND = RECORD_BOUND + MAX_PROPERTIES + HEADER_SIZE


def batch_passes(messages: Sequence[Message], config: BrokerConfig, queues: Queues,
                 largest: int = -1) -> bool:
    """Whether every one of ``messages`` surely passes :func:`check_messages_each` (False:
    not proven; ``largest`` as :func:`check_messages` has it). Checked once for the batch:

    * each topic's name rules (valid, not one of FMQ's own) and its queue count;
    * the body limits, ``max_message_size`` and each topic's own (its existence too:
      :meth:`Queues.check_topic_takes`), by the largest body, as no other body is larger;
    * the records' room in a segment, by the bound every checked record keeps
      (:data:`FIT_BOUND`) for the largest body.

    Per message only what is its own: its type, its topic's identity, its body's type and
    size, its queue id in its topic's range, and its key, tags and properties where it
    has any (``check_fields``: a message without them costs a test of each)."""
    if type(largest) is int and largest >= 0:
        return _known_batch_passes(messages, config, queues, largest)
    if type(messages) is not list and type(messages) is not tuple:
        return False
    queue_count = queues.queue_count
    counts: dict[str, int] = {}  # the topics seen (their names passed), their queue counts
    topic = None  # the previous message's topic, and its queue count
    count = 0
    size = 0  # the largest body so far
    for m in messages:
        if type(m) is not Message:
            return False
        # The fields read from the message's dict: compiled, an attribute read costs a
        # type lookup besides (about 230 instructions, against 130). A field deleted from
        # it (KeyError) is not proven.
        fields = m.__dict__
        t = fields["topic"]
        if type(t) is not str:
            return False
        if t != topic:  # the decoder makes a str per message: equal, not the same
            known = counts.get(t)
            if known is None:
                if not valid_topic_name(t) or is_internal_topic(t):
                    return False
                known = counts[t] = queue_count(t)
            topic, count = t, known
        body = fields["body"]
        kind = type(body)
        if kind is not bytes and kind is not bytearray and kind is not memoryview:
            return False
        n = len(body)
        if n > size:
            size = n
        queue_id = fields["queue_id"]
        if queue_id is not None and (type(queue_id) is not int or not 0 <= queue_id < count):
            return False
        properties = fields["properties"]
        if fields["key"] is not None or fields["tags"] is not None or (
                properties is not None and (type(properties) is not dict or properties)):
            check_fields(m)
    if size > config.max_message_size or size + FIT_BOUND > config.segment_size:
        return False
    for t in counts:
        queues.check_topic_takes(t, size)
    return True


def _known_batch_passes(messages: Sequence[Message], config: BrokerConfig, queues: Queues,
                        largest: int) -> bool:
    """:func:`batch_passes` of a batch whose messages share the topic and queue id of
    ``messages[largest]``, the first with the largest body, each with a body of bytes and
    a key, tags and properties that pass ``check_message``'s rules (the caller's decoder
    says so): what is left holds for all when it holds for that one."""
    first = messages[largest]
    topic, queue_id, size = first.topic, first.queue_id, len(first.body)
    if (not valid_topic_name(topic) or is_internal_topic(topic)
            or size > config.max_message_size or size + FIT_BOUND > config.segment_size):
        return False
    if queue_id is not None and (type(queue_id) is not int
                                 or not 0 <= queue_id < queues.queue_count(topic)):
        return False
    queues.check_topic_takes(topic, size)
    return True


def check_messages_each(messages: Sequence[Message], config: BrokerConfig, queues: Queues
                        ) -> None:
    """The reference of :func:`check_messages`: raise the typed error of the first message
    that cannot be stored as it is, checking message by message: the message's own checks,
    then its topic's (:meth:`Queues.check_topic`), then its record's room in a segment."""
    max_size, segment_size, queue_count = (config.max_message_size, config.segment_size,
                                           queues.queue_count)
    # The topics whose name passed the checks, with their queue count: each is checked and
    # counted once per batch (a batch does not change a topic's queue count), not once per
    # message with a queue id.
    counted: dict[str, int] = {}
    for m in messages:
        topic = m.topic if type(m) is Message else None
        count = counted.get(topic) if type(topic) is str else None
        if count is None:
            check_message(m, max_size, queue_count)
            if type(topic) is str:
                counted[topic] = queue_count(topic)
        else:
            check_message(m, max_size, count, topic_checked=True)
        queues.check_topic(m)
        check_fits(m, segment_size)


def append_message_locked(log_: Log, queues: Queues, m: Message, store_time: int) -> Record:
    """Append one message's MESSAGE record at its queue's next offset (the caller holds
    ``log_.lock`` and reserved the segments); returns the record placed."""
    qid = queues.pick_queue(m)
    qoff = queues.next_offset(m.topic, qid)
    rec = Record(RecordType.MESSAGE, store_time=store_time, queue_id=qid, queue_offset=qoff,
                 topic=m.topic, key=m.key or None, tags=m.tags or None,
                 properties=m.properties, body=bytes(m.body))
    log_.append_locked(rec)
    queues.advance(m.topic, qid, qoff, len(m.body))
    return rec


def place_message_locked(log_: Log, queues: Queues, m: Message, store_time: int
                         ) -> SendResult:
    """:func:`append_message_locked`, answered with the message's result."""
    rec = append_message_locked(log_, queues, m, store_time)
    return new_send_result(rec.log_offset, rec.queue_id, rec.queue_offset)


def place_messages(log_: Log, queues: Queues, messages: Sequence[Message],
                   packed: bool = False) -> tuple[Sequence[SendResult], int]:
    """Place one MESSAGE record per message (all or none: the segments are reserved first).
    Returns their results and the log offset they end at; nothing is acknowledged before the
    log is durable up to that offset (``log_.wait_durable``). ``packed``: the results of a
    run of two messages or more may come as :class:`PackedResults` (the server's answers
    copy them as they are), else they are a list."""
    results = []
    store_time = now_ms()
    with log_.lock:
        reserve_segments(log_, messages)
        # One message costs less record by record on the pure path (a run's set-up is
        # Python there); a batch costs less as a run on both.
        if len(messages) > 1 and log_.takes_message_runs():
            results = _place_run(log_, queues, messages, store_time, packed)
        else:
            for m in messages:
                results.append(place_message_locked(log_, queues, m, store_time))
        end = log_.next_offset
    return results, end


def _place_run(log_: Log, queues: Queues, messages: Sequence[Message], store_time: int,
               packed: bool) -> Sequence[SendResult]:
    """:func:`place_messages`' loop in one call of the log (no :class:`Record` per
    message): the same records, queue offsets and results."""
    batch = messages if type(messages) is list else list(messages)
    queue_ids, queue_offsets = queues.plan(batch)
    placed: list[tuple[int, QueueEntry]] = []
    try:
        log_.append_messages_locked(batch, queue_ids, queue_offsets, store_time, placed)
    finally:  # what was placed is taken, even when a later record failed
        queues.advance_run(batch, queue_ids, queue_offsets, len(placed))
    if packed:
        try:
            return _packed_results(placed, queue_ids, queue_offsets)
        except struct.error:  # a value outside the wire's field: the answer's codec says so
            pass
    return [new_send_result(e.data_offset, qid, qoff)
            for (_end, e), qid, qoff in zip(placed, queue_ids, queue_offsets, strict=True)]


def _packed_results(placed: list[tuple[int, QueueEntry]], queue_ids: list[int],
                    queue_offsets: list[int]) -> PackedResults:
    result_format = PackedResults.FORMAT
    size = result_format.size
    pack_into = result_format.pack_into
    data = bytearray(size * len(placed))
    at = 0
    for (_end, e), qid, qoff in zip(placed, queue_ids, queue_offsets, strict=True):
        pack_into(data, at, e.data_offset, qid, qoff)
        at += size
    return PackedResults(bytes(data))
