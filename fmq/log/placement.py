"""What every writer of the log shares (plain sends, transaction records, timers, offsets,
terms alike): the wall-clock stamp of a record, creating the segments a request needs before
any of its records is placed, and reading a stored record back."""

from __future__ import annotations

import time
from collections.abc import Sequence

from fmq.log.log import Log
from fmq.log.record import RECORD_BOUND, Record, decode, encoded_size
from fmq.message import MAX_PROPERTIES, Message


def now_ms() -> int:
    """Wall-clock milliseconds: the ``store_time`` of a record."""
    return time.time_ns() // 1_000_000


def reserve_segments(log_: Log, messages: Sequence[Message], overhead: int = 0,
                     first: int = 0) -> None:
    """Create the segments the records of ``messages`` (after one record of ``first``
    bytes) will roll into, before any of them is placed (log lock held), so that a refused
    request stores nothing. ``messages`` passed ``check_message``. Exact sizes cost a
    microsecond or more per message, so they are computed only when a rough upper bound
    does not fit in the active segment."""
    # One plain loop: two generator expressions cost more than the rest of this call for
    # the usual request of one message.
    rough = first + len(messages) * (RECORD_BOUND + overhead)
    for m in messages:
        rough += len(m.body)
        if m.properties:
            rough += MAX_PROPERTIES
    if log_.fits_in_active(rough):
        return
    sizes = [first] if first else []
    log_.reserve_locked(sizes + [encoded_size(m, overhead) for m in messages])


def read_record(log_: Log, offset: int, size: int, max_record_size: int) -> Record:
    """The record stored at ``offset`` (``size`` bytes), decoded and checked."""
    return decode(log_.read(offset, size), 0, base_offset=offset,
                  max_record_size=max_record_size)
