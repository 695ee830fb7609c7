# cython: language_level=3
"""Compiled twin of :mod:`fmq.tx.open_transaction`: :class:`PreMessage` and
:class:`OpenTransaction` as extension types, their fields stored in the object by C where
the pure classes' ``__init__`` sets slots through the interpreter's attribute protocol
(about 3,000 instructions per transaction, even compiled, before this twin). The same
fields, defaults, methods, repr and comparison as the pure module (its docstrings tell
what each is); tests/native/test_tx_writer_twins.py compares the two.
"""

import threading
import time

from fmq.tx.state import TxState

cdef object _monotonic = time.monotonic
cdef object _new_lock = threading.Lock


cdef class PreMessage:
    """A PRE_MESSAGE in the log: where it is and what the future REF needs."""

    cdef public object offset, size, topic, queue_id, key, tags, body_size, queue_offset

    def __init__(self, offset, size, topic, queue_id, key, tags, body_size,
                 queue_offset=-1):
        self.offset = offset
        self.size = size
        self.topic = topic
        self.queue_id = queue_id
        self.key = key
        self.tags = tags
        self.body_size = body_size
        self.queue_offset = queue_offset

    def _fields(self):
        return (self.offset, self.size, self.topic, self.queue_id, self.key, self.tags,
                self.body_size, self.queue_offset)

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return self._fields() == other._fields()
        return NotImplemented

    def __ne__(self, other):
        if other.__class__ is self.__class__:
            return self._fields() != other._fields()
        return NotImplemented

    def __hash__(self):  # mutable, compared by value: no hash, as the pure class
        raise TypeError(f"unhashable type: '{type(self).__name__}'")

    def __repr__(self):
        return (f"PreMessage(offset={self.offset!r}, size={self.size!r}, topic={self.topic!r}, "
                f"queue_id={self.queue_id!r}, key={self.key!r}, tags={self.tags!r}, "
                f"body_size={self.body_size!r}, queue_offset={self.queue_offset!r})")

    @classmethod
    def of(cls, rec):
        """The PRE_MESSAGE record ``rec`` (its offset and size set by encode or decode)."""
        return cls(rec.log_offset, rec.size, rec.topic, rec.queue_id, rec.key, rec.tags,
                   len(rec.body))


cdef class OpenTransaction:
    """A transaction prepared in the log and not yet ended, as the broker tracks it (not
    :class:`fmq.client.Transaction`, a producer's handle on one)."""

    cdef public object tx_id, producer_group, prepare_offset, store_time, messages
    cdef public object expected_messages, prepared, state, registered_at, checks
    cdef public object next_check_at, lease_until, lease_owner, busy

    def __init__(self, tx_id, producer_group, prepare_offset, store_time, messages=None,
                 expected_messages=0, prepared=False, state=TxState.OPEN):
        self.tx_id = tx_id
        self.producer_group = producer_group
        self.prepare_offset = prepare_offset
        self.store_time = store_time
        self.messages = [] if messages is None else messages
        self.expected_messages = expected_messages
        self.prepared = prepared
        self.state = state
        self.registered_at = _monotonic()
        self.checks = 0
        self.next_check_at = 0.0
        self.lease_until = 0.0
        self.lease_owner = None
        self.busy = _new_lock()

    def __repr__(self):
        return (f"OpenTransaction(tx_id={self.tx_id!r}, producer_group="
                f"{self.producer_group!r}, prepare_offset={self.prepare_offset}, "
                f"messages={len(self.messages)}, prepared={self.prepared}, "
                f"state={self.state.value})")

    @property
    def key(self):
        return self.producer_group, self.tx_id

    @property
    def complete(self):
        """Every PRE_MESSAGE the PREPARE announced is in the log."""
        return len(self.messages) >= self.expected_messages

    @property
    def referenced(self):
        return any(m.queue_offset >= 0 for m in self.messages)

    def info(self, now_ms):
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
