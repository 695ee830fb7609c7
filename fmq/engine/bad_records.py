"""Damaged records met by reads: each is logged at ERROR once, with its offset and what to
do, and counted (``broker.stats()``, the metrics). Nothing here skips a record: a consumer
moves past one only when an operator resets its group's offset (``fmq groups
reset-offsets``), see docs/operations.md, section *A damaged record*."""

from __future__ import annotations

import logging
import threading

from fmq.errors import BadRecord, IncompleteRecord

logger = logging.getLogger("fmq.broker")

#: Distinct damaged offsets remembered for "log once"; past this many every read logs again
#: (a log this damaged needs an operator anyway, and memory stays bounded).
REMEMBERED = 10_000


class BadRecords:
    """Counts and logs the damaged records reads meet. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[int] = set()
        #: Distinct damaged records met since the broker opened.
        self.records = 0
        #: Reads refused because their record was damaged.
        self.reads = 0

    def met(self, exc: BadRecord | IncompleteRecord, segment: str, topic: str, queue_id: int,
            queue_offset: int) -> None:
        """Log (the first time) and count the damage ``exc`` found; the reader raises it."""
        with self._lock:
            self.reads += 1
            first = exc.offset not in self._seen
            if first:
                self.records += 1
                if len(self._seen) < REMEMBERED:
                    self._seen.add(exc.offset)
        if first:
            logger.error(
                "damaged record at log offset %d (segment %s), message %s/%d@%d: %s. Its "
                "consumers stop at it. Check the log with `fmq log verify DIR` (stopped "
                "broker); restore the data directory from a replica or backup, or cut it with "
                "`fmq log repair DIR --cut-at %d`; or, once verify has shown the damage, let "
                "each group skip the message: `fmq groups reset-offsets GROUP --topic %s "
                "--queue %d --to-offset %d --execute`", exc.offset, segment, topic, queue_id,
                queue_offset, exc.reason, exc.offset, topic, queue_id, queue_offset + 1)
