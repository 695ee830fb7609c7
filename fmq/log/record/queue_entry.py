"""What a MESSAGE, TX_MESSAGE or REF_MESSAGE record contributes to its consume queue: the
record format's statement of the one index entry a scan of the log may make without a
:class:`~fmq.log.record.Record`.

The type lives with the format, not with the index, because the log builds it: the runs of
this package (``runs.py`` and their compiled twins in ``_record_c.pyx``) return a plain
message as its entry when recovery's redo or the index's catch-up reads the log, and a batch
of sends hands its entries to the dispatcher. :mod:`fmq.index.derive` makes the same entry
from a decoded record; :mod:`fmq.index.entry_types` re-exports this type beside the index's
other entries.

Every builder makes the tuple directly (``tuple.__new__(QueueEntry, (...))``: a NamedTuple's
own constructor is a Python function parsing its arguments, paid once per message), so the
field order below is the one the builders write.
"""

from __future__ import annotations

from typing import NamedTuple


class QueueEntry(NamedTuple):
    """The record at ``source_offset`` holds message ``queue_offset`` of queue ``queue_id``
    of ``topic``."""

    topic: str
    queue_id: int
    queue_offset: int
    #: Log offset and length of the record holding the body (the PRE_MESSAGE for a REF).
    data_offset: int
    data_size: int
    #: CRC-32C of the tags' UTF-8 bytes, 0 without tags.
    tag_hash: int
    store_time: int
    key: str | None
    #: Log offset of the indexed record itself (the REF for a REF).
    source_offset: int
