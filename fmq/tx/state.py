"""The states of a transaction and what feedback offers a producer: plain values that a client
may import without any of the broker's storage code."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class TxState(StrEnum):
    """What became (or is to become) of a transaction."""

    OPEN = "open"  # prepared, undecided
    COMMITTING = "committing"  # REF/TX records written, COMMIT not yet
    COMMIT = "commit"
    ROLLBACK = "rollback"
    UNKNOWN = "unknown"  # a producer's answer: "cannot tell yet"


@dataclass(frozen=True)
class UncertainTx:
    """An open transaction offered to a producer by feedback."""

    tx_id: str
    producer_group: str
    prepare_offset: int
    store_time: int
    checks: int
    messages: list[dict]
