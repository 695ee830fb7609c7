"""What the broker holds of one open transaction: :class:`OpenTransaction` and the
:class:`PreMessage` of each of its messages (:mod:`fmq.tx.manager` keeps them).

One of each is made per PREPARE (per message) on the event loop: their compiled twin
(``fmq.tx._open_transaction_c.pyx``, extension types whose fields C stores) runs where
``fmq.native.choose`` picks it, and :mod:`fmq.tx.manager` is the one place the rest of
FMQ takes the two classes from, so a process uses one pair of them throughout.
tests/native/test_tx_writer_twins.py compares the two.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from fmq.tx.state import TxState

_monotonic = time.monotonic
_new_lock = threading.Lock

if TYPE_CHECKING:  # the manager holds state only; it never decodes records itself
    from fmq.log.record import Record

#: What names a transaction: (producer group, transaction id).
TxKey = tuple[str, str]


class PreMessage:
    """A PRE_MESSAGE in the log: where it is and what the future REF needs.

    Written out as the dataclass it was (its fields, ``__eq__`` by value, its repr, no
    hash), as its compiled twin is."""

    __slots__ = ("offset", "size", "topic", "queue_id", "key", "tags", "body_size",
                 "queue_offset")
    __hash__ = None  # mutable, compared by value (as the dataclass had it)

    def __init__(self, offset: int, size: int, topic: str, queue_id: int, key: str | None,
                 tags: str | None, body_size: int, queue_offset: int = -1) -> None:
        self.offset = offset
        self.size = size
        self.topic = topic
        self.queue_id = queue_id
        self.key = key
        self.tags = tags
        self.body_size = body_size
        #: Set once a REF/TX record for it is durable (queue offset it got).
        self.queue_offset = queue_offset

    def _fields(self) -> tuple:
        return (self.offset, self.size, self.topic, self.queue_id, self.key, self.tags,
                self.body_size, self.queue_offset)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._fields() == other._fields()  # type: ignore[attr-defined]
        return NotImplemented

    def __repr__(self) -> str:
        return (f"PreMessage(offset={self.offset!r}, size={self.size!r}, topic={self.topic!r}, "
                f"queue_id={self.queue_id!r}, key={self.key!r}, tags={self.tags!r}, "
                f"body_size={self.body_size!r}, queue_offset={self.queue_offset!r})")

    @classmethod
    def of(cls, rec: Record) -> PreMessage:
        """The PRE_MESSAGE record ``rec`` (its offset and size set by encode or decode)."""
        return cls(rec.log_offset, rec.size, rec.topic, rec.queue_id, rec.key, rec.tags,
                   len(rec.body))


class OpenTransaction:
    """A transaction prepared in the log and not yet ended, as the broker tracks it (not
    :class:`fmq.client.Transaction`, a producer's handle on one).

    A slotted class with a written-out ``__init__``: one is made per transaction on the
    event loop, and the dataclass's default factories cost about as much again."""

    __slots__ = ("tx_id", "producer_group", "prepare_offset", "store_time", "messages",
                 "expected_messages", "prepared", "state", "registered_at", "checks",
                 "next_check_at", "lease_until", "lease_owner", "busy")

    def __init__(self, tx_id: str, producer_group: str, prepare_offset: int, store_time: int,
                 messages: list[PreMessage] | None = None, expected_messages: int = 0,
                 prepared: bool = False, state: TxState = TxState.OPEN) -> None:
        self.tx_id = tx_id
        self.producer_group = producer_group
        self.prepare_offset = prepare_offset
        self.store_time = store_time  # wall clock ms of the PREPARE (for display only)
        self.messages: list[PreMessage] = [] if messages is None else messages
        #: PRE_MESSAGEs the PREPARE announced (0: not recorded, an older log).
        self.expected_messages = expected_messages
        #: PREPARE and every PRE_MESSAGE are durable (set after the prepare's fsync, or by
        #: recovery for a complete prepare). Until then a retry of the prepare must wait.
        self.prepared = prepared
        self.state = state
        self.registered_at = _monotonic()
        self.checks = 0
        self.next_check_at = 0.0
        self.lease_until = 0.0
        #: Who holds the lease (an opaque token: the server passes the polling connection,
        #: embedded callers None). Only the holder can return the lease early.
        self.lease_owner: object = None
        #: Serialises commit/rollback of this one transaction.
        self.busy = _new_lock()

    def __repr__(self) -> str:
        return (f"OpenTransaction(tx_id={self.tx_id!r}, producer_group="
                f"{self.producer_group!r}, prepare_offset={self.prepare_offset}, "
                f"messages={len(self.messages)}, prepared={self.prepared}, "
                f"state={self.state.value})")

    @property
    def key(self) -> TxKey:
        return self.producer_group, self.tx_id

    @property
    def complete(self) -> bool:
        """Every PRE_MESSAGE the PREPARE announced is in the log."""
        return len(self.messages) >= self.expected_messages

    @property
    def referenced(self) -> bool:
        return any(m.queue_offset >= 0 for m in self.messages)

    def info(self, now_ms: int) -> dict:
        return {
            "tx_id": self.tx_id,
            "producer_group": self.producer_group,
            "state": self.state.value if self.complete else "incomplete",
            "age_ms": max(0, now_ms - self.store_time),
            "checks": self.checks,
            "messages": len(self.messages),
            "expected_messages": self.expected_messages,
            "prepare_offset": self.prepare_offset,
        }
