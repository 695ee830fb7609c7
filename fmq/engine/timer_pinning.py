"""When retention may move the pending timers that pin the segment it would delete, and
saying so when the pending timers alone exceed ``retention_bytes``.

Moving (relocating) a pending timer copies its TIMER to the log head, so it frees only the
other records around it. Three rules keep retention from moving the same timers forever:

* within one pass a timer moves at most once (retention moves only timers stored before
  the pass began; a copy made in this pass pins its segment until the next pass);
* when the pending timers alone take ``retention_bytes`` or more, the log cannot get under
  the limit: for size they move only once the other bytes of the log reach
  ``retention_bytes`` (so the log stays under about the timers plus the limit, and each
  move frees at least as much as it writes);
* for size they never move again while nothing was written to the log since they last
  moved (an idle broker settles after one pass).

Age (``retention_ms``) is not affected: a segment too old moves its timers once per pass,
and their copies are young.
"""

from __future__ import annotations

import logging

from fmq.index.store import IndexStore
from fmq.log.log import Log
from fmq.units import size as fmt_size

logger = logging.getLogger("fmq.broker")  # the broker's lines keep one logger name


class TimerPinning:
    """The timer rules of one broker's retention, and the state it reports."""

    def __init__(self, retention_bytes: int, log_: Log, index: IndexStore) -> None:
        self.limit = retention_bytes
        self.log = log_
        self.index = index
        #: Bytes of the pending timers when, at the end of the last pass, they alone
        #: exceeded ``retention_bytes`` and kept the log over it; else 0.
        self.pinning_bytes = 0
        self._moved_at: int | None = None  # the log head after the last pass that moved some
        self._measured: int | None = None  # the pending timers' bytes, once per pass

    def begin_pass(self) -> None:
        self._measured = None

    def pending_bytes(self) -> int:
        """Bytes of the pending timers, read once per pass (a walk of the timer table)."""
        if self._measured is None:
            self._measured = self.index.timers.pending_bytes()
        return self._measured

    def pin(self, before: int) -> bool:
        """Whether a pending timer lies before log offset ``before``."""
        oldest = self.index.timers.summary()["oldest_offset"]
        return oldest is not None and oldest < before

    def may_move(self, log_bytes: int, too_old: bool) -> bool:
        """Whether retention may move the pending timers of the oldest segment, deleted
        because it is ``too_old`` or because the log holds ``log_bytes``."""
        if too_old:
            return True
        if self._moved_at == self.log.next_offset:
            return False
        pending = self.pending_bytes()
        return pending < self.limit or log_bytes - pending >= self.limit

    def moved(self) -> None:
        """This pass moved timers (called once it ends)."""
        self._moved_at = self.log.next_offset

    def end_pass(self, log_bytes: int, oldest_end: int) -> None:
        """Record whether the pending timers alone keep the log (``log_bytes``, its oldest
        segment ending at ``oldest_end``) over the limit; log it once each time that
        changes. Timers that do not pin the oldest segment are not what keeps it over."""
        over = bool(self.limit) and log_bytes > self.limit and self.pin(oldest_end)
        pending = self.pending_bytes() if over else 0
        now = pending if pending >= self.limit and over else 0
        if now and not self.pinning_bytes:
            logger.warning(
                "retention: pending timers hold %s, more than retention_bytes (%s): the log "
                "cannot shrink below them; retention moves them again only once %s of other "
                "records have accumulated. Raise retention_bytes, or consume or schedule "
                "less far ahead (fmq stats: timers_pinning_retention_bytes)",
                fmt_size(pending), fmt_size(self.limit), fmt_size(self.limit))
        elif self.pinning_bytes and not now:
            logger.info("retention: pending timers no longer exceed retention_bytes (%s)",
                        fmt_size(self.limit))
        self.pinning_bytes = now
