"""The dedup window of idempotent sends: per producer id the results of its last sequence
numbers, and the results of recent application message ids, so that a resend is answered
with the original's result instead of being stored again.

It is derived from the log alone, by one function of a stored record
(:meth:`DedupWindow.remember`): the send path calls it with each MESSAGE record it places,
recovery's redo pass and a follower with every record they read, in log order. Only a
client's idempotent send counts (:func:`counts_as_send`): a MESSAGE record that does not
deliver a timer. A delivered scheduled message or retry is the broker's write, not a send
(its SEND_AT was never checked against the window), so it enters no window. The checkpoint
never moves the recovery offset past the oldest record the window remembers
(:meth:`DedupWindow.oldest_offset`), so a restart, a crash, an index rebuild (which replays
the whole log) or a fail-over rebuilds exactly this state.

Every key holds the send's principal (:data:`~fmq.message.PRINCIPAL_PROPERTY`, written
into the record by a server with users; None without users and in older records): one
user's producer ids and message ids are never another's.

Rules (docs/format.md, "Idempotent producers"): for a producer id with last stored
sequence ``L`` and window ``N``,

* a sequence it remembers is a duplicate: answered with the stored result;
* a sequence above ``L`` is new (gaps are allowed: a send the broker refused leaves one);
* a sequence in ``(L - N, L]`` it does not remember was never stored (every stored
  sequence in that range is remembered): it is new, stored late;
* a sequence ``<= L - N`` it does not remember raises
  :class:`~fmq.errors.OutOfOrderSequence`: whether it was stored can no longer be told.

A sequence and a message id are remembered for ``window_ms`` after they were stored (a
resend later than that may be stored again), a message id less when more than ``max_ids``
are remembered. Not thread-safe: the caller holds the log lock.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping

from fmq.config import BrokerConfig
from fmq.errors import OutOfOrderSequence
from fmq.log.record import Record, RecordType
from fmq.message import (
    MESSAGE_ID_PROPERTY,
    PRINCIPAL_PROPERTY,
    PRODUCER_ID_PROPERTY,
    SEQUENCE_PROPERTY,
    SendResult,
)

_LOW = (1 << 64) - 1
_MESSAGE = RecordType.MESSAGE

#: (principal, producer id, sequence) of a sequenced send.
SequenceKey = tuple[str | None, str, int]
#: (principal, topic, message id) of a send with an application's dedup key.
MessageIdKey = tuple[str | None, str, str]


def send_keys(topic: str, properties: Mapping[str, str]
              ) -> tuple[SequenceKey | None, MessageIdKey | None]:
    """The window's keys of a send to ``topic`` with ``properties`` (None for what it does
    not carry): the one derivation the send path and every replay share."""
    principal = properties.get(PRINCIPAL_PROPERTY)
    seq_key = id_key = None
    producer = properties.get(PRODUCER_ID_PROPERTY)
    if producer is not None:
        try:
            seq_key = (principal, producer, int(properties[SEQUENCE_PROPERTY]))
        except (KeyError, ValueError):  # checked on the way in; never trust the log
            pass
    message_id = properties.get(MESSAGE_ID_PROPERTY)
    if message_id is not None:
        id_key = (principal, topic, message_id)
    return seq_key, id_key


def counts_as_send(record: Record) -> bool:
    """Whether a stored record is a client's idempotent send, the only records the window
    remembers: a MESSAGE record (not a transaction's) that does not deliver a timer (its
    ``ref_offset`` names no TIMER), with a producer id or a message id."""
    props = record.properties
    return (record.type == _MESSAGE and record.ref_offset < 0 and bool(props)
            and (PRODUCER_ID_PROPERTY in props or MESSAGE_ID_PROPERTY in props))


def _pack(r: SendResult) -> int:
    """A result as one int (a window holds many: an int takes half the memory of a
    SendResult, about 150 bytes a sequence in all)."""
    return (r.offset << 96) | (r.queue_id << 64) | r.queue_offset


def _unpack(v: int) -> SendResult:
    return SendResult(v >> 96, (v >> 64) & 0xFFFFFFFF, v & _LOW)


class _Producer:
    """What the window remembers of one producer id."""

    __slots__ = ("last", "last_time", "order", "results")

    def __init__(self) -> None:
        self.last = -1
        self.last_time = 0
        self.results: dict[int, int] = {}  # sequence -> packed result
        #: ``sequence << 64 | store time`` in the order they were stored.
        self.order: deque[int] = deque()


class DedupWindow:
    """The sequences and message ids remembered, with their results."""

    def __init__(self, per_producer: int, window_ms: int, max_ids: int) -> None:
        self.per_producer = per_producer
        self.window_ms = window_ms
        self.max_ids = max_ids
        #: (principal, producer id) -> what is remembered of it.
        self._producers: dict[tuple[str | None, str], _Producer] = {}
        #: (principal, topic, message id) -> (result, store time), oldest first.
        self._ids: OrderedDict[MessageIdKey, tuple[SendResult, int]] = OrderedDict()
        #: Resends answered with the original's result since the broker opened.
        self.duplicates = 0

    @classmethod
    def for_config(cls, config: BrokerConfig) -> DedupWindow:
        return cls(config.dedup_window_messages, config.dedup_window_ms,
                   config.dedup_max_message_ids)

    # ------------------------------------------------------------------ the send path

    def lookup_sequence(self, key: SequenceKey, now: int) -> SendResult | None:
        """The stored result of the send with ``key``, or None when it is new; raises
        OutOfOrderSequence when it is too old to tell (see the module docstring)."""
        principal, producer, seq = key
        p = self._producers.get((principal, producer))
        if p is None:
            return None
        if p.last_time < now - self.window_ms:
            del self._producers[(principal, producer)]
            return None
        result = p.results.get(seq)
        if result is None:
            if seq <= p.last - self.per_producer:
                raise OutOfOrderSequence(producer, seq, p.last, self.per_producer)
            return None
        return _unpack(result)

    def lookup_message_id(self, key: MessageIdKey, now: int) -> SendResult | None:
        """The stored result of the send with ``key``, if remembered."""
        entry = self._ids.get(key)
        if entry is None or entry[1] < now - self.window_ms:
            return None
        return entry[0]

    def remember(self, record: Record) -> None:
        """What the stored ``record`` contributes to the window (the one rule: see the
        module docstring). The send path calls it with each record it places, recovery's
        redo and a follower with each record they read."""
        if not counts_as_send(record):
            return
        seq_key, id_key = send_keys(record.topic, record.properties)
        result = SendResult(record.log_offset, record.queue_id, record.queue_offset)
        store_time = record.store_time
        if seq_key is not None:
            self._remember_sequence(seq_key, result, store_time)
        if id_key is not None and self.max_ids:
            self._ids.pop(id_key, None)
            self._ids[id_key] = (result, store_time)
            while len(self._ids) > self.max_ids:
                self._ids.popitem(last=False)

    def _remember_sequence(self, key: SequenceKey, result: SendResult,
                           store_time: int) -> None:
        principal, producer, seq = key
        p = self._producers.get((principal, producer))
        if p is None:
            p = self._producers[(principal, producer)] = _Producer()
        if seq not in p.results:
            p.order.append((seq << 64) | max(store_time, 0))
        p.results[seq] = _pack(result)
        p.last_time = max(p.last_time, store_time)
        if seq > p.last:
            p.last = seq
            floor = seq - self.per_producer
            order, results = p.order, p.results
            while order and order[0] >> 64 <= floor:
                del results[order.popleft() >> 64]

    # ------------------------------------------------------------------ upkeep

    def prune(self, now: int) -> None:
        """Forget producers and message ids older than the window."""
        cutoff = now - self.window_ms
        for producer, p in list(self._producers.items()):
            order, results = p.order, p.results
            while order and order[0] & _LOW < cutoff:
                del results[order.popleft() >> 64]
            if not order:
                del self._producers[producer]
        ids = self._ids
        while ids and next(iter(ids.values()))[1] < cutoff:
            ids.popitem(last=False)

    def oldest_offset(self) -> int | None:
        """The log offset of the oldest record remembered (recovery must replay from there
        to rebuild the window), None when nothing is remembered."""
        offsets = [p.results[p.order[0] >> 64] >> 96 for p in self._producers.values()
                   if p.order]
        if self._ids:
            offsets.append(next(iter(self._ids.values()))[0].offset)
        return min(offsets, default=None)

    def drop_from(self, end: int) -> None:
        """Forget what was stored at or after log offset ``end`` (an operator cut the log
        there after the window was saved)."""
        for producer, p in list(self._producers.items()):
            keep = [e for e in p.order if p.results[e >> 64] >> 96 < end]
            if len(keep) != len(p.order):
                p.results = {e >> 64: p.results[e >> 64] for e in keep}
                p.order = deque(keep)
                if not keep:
                    del self._producers[producer]
                else:
                    p.last = max(p.results)
        for key in [k for k, v in self._ids.items() if v[0].offset >= end]:
            del self._ids[key]

    def export(self) -> dict:
        """Everything remembered, as JSON-ready data (:mod:`fmq.recovery.dedup_file`,
        format 2: each entry starts with its principal)."""
        return {
            "producers": [[principal, producer, p.last, p.last_time,
                           [[e >> 64, e & _LOW, p.results[e >> 64]] for e in p.order]]
                          for (principal, producer), p in self._producers.items()],
            "message_ids": [[pr, t, i, _pack(r), st]
                            for (pr, t, i), (r, st) in self._ids.items()],
        }

    def load(self, data: dict) -> None:
        """Replace what is remembered with ``export()``'s data."""
        self._producers.clear()
        for principal, producer, last, last_time, entries in data["producers"]:
            p = self._producers[(principal, producer)] = _Producer()
            p.last, p.last_time = last, last_time
            for seq, store_time, packed in entries:
                p.order.append((seq << 64) | store_time)
                p.results[seq] = packed
        self._ids = OrderedDict(((pr, t, i), (_unpack(packed), st))
                                for pr, t, i, packed, st in data["message_ids"])

    def __len__(self) -> int:
        return len(self._producers) + len(self._ids)

    def snapshot(self) -> dict:
        """What the answers depend on, comparable with ``==`` (tests compare a window
        rebuilt from the log with the live one): per producer its last sequence and the
        results of the sequences in its window, and the message ids."""
        n = self.per_producer
        return {
            "producers": {k: (p.last, {s: _unpack(r) for s, r in p.results.items()
                                       if s > p.last - n})
                          for k, p in self._producers.items()},
            "message_ids": {k: v[0] for k, v in self._ids.items()},
        }

    def counts(self) -> dict[str, int]:
        return {"dedup_producers": len(self._producers),
                "dedup_message_ids": len(self._ids),
                "duplicates_dropped": self.duplicates}
