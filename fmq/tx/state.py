"""The states of a transaction and what feedback offers a producer: plain values that a client
may import without any of the broker's storage code."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fmq.message import Message


class TxState(StrEnum):
    """What became (or is to become) of a transaction."""

    OPEN = "open"  # prepared, undecided
    COMMITTING = "committing"  # REF/TX records written, COMMIT not yet
    COMMIT = "commit"
    ROLLBACK = "rollback"
    UNKNOWN = "unknown"  # a producer's answer: "cannot tell yet"


@dataclass
class PreparedMessage(Message):
    """A message of an open transaction, as a check-back offers it: the :class:`Message`
    its producer sent (``queue_id`` is the queue it is to go to) and ``offset``, the log
    offset of its prepare record."""

    offset: int = -1

    def __getitem__(self, name: str) -> Any:
        # Offers held dicts before 0.2: ``m["body"]`` still reads ``m.body``.
        try:
            return getattr(self, name)
        except AttributeError:
            raise KeyError(name) from None

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name, default)


@dataclass(frozen=True)
class UncertainTx:
    """An open transaction offered to a producer by feedback."""

    tx_id: str
    producer_group: str
    prepare_offset: int
    store_time: int
    checks: int
    messages: list[PreparedMessage]
