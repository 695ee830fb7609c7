"""Reading the records a pull returns: neighbours in the log share one read.

A queue's records are interleaved with other queues' in the log, a few records apart under
load. One ``pread`` per record cost a system call, a segment lookup and a copy each; one
``pread`` over a run of close records, sliced as views, costs one of each per run, and the
other queues' bytes it copies along cost less than the calls it saves (a 1 KiB record of
four busy queues: 3 KiB copied against a call of a few microseconds).
"""

from __future__ import annotations

from fmq.errors import OffsetOutOfRange
from fmq.log.log import Log

#: Records at most this many bytes apart are read together.
MAX_GAP = 16 * 1024
#: The most bytes one read spans.
MAX_SPAN = 1 << 20


def read_records(log_: Log, places: list[tuple[int, int]]) -> list[memoryview | bytes | None]:
    """The bytes of each (log offset, size) in ``places``, in order: exactly ``size`` bytes
    each (a view into a shared read), or None where retention deleted the segment after the
    index was read. Raises :class:`OffsetOutOfRange` for any other range the log does not
    hold, as :meth:`Log.read` does."""
    out: list[memoryview | bytes | None] = []
    n = len(places)
    i = 0
    while i < n:
        start, size = places[i]
        end = start + size
        j = i + 1
        while j < n:
            offset, size = places[j]
            if offset < end or offset - end > MAX_GAP or offset + size - start > MAX_SPAN:
                break
            end = offset + size
            j += 1
        if j - i > 1:
            try:
                seg = log_.segment_for(start)
            except OffsetOutOfRange:
                seg = None
            if seg is not None:
                while j - i > 1 and places[j - 1][0] + places[j - 1][1] > seg.end:
                    j -= 1  # a run never crosses into the next segment
                end = places[j - 1][0] + places[j - 1][1]
                if j - i > 1:
                    view = memoryview(seg.read(start - seg.base, end - start))
                    for offset, size in places[i:j]:
                        out.append(view[offset - start: offset - start + size])
                    i = j
                    continue
        out.append(_read_one(log_, *places[i]))  # alone, or where the run's start failed
        i += 1
    return out


def _read_one(log_: Log, offset: int, size: int) -> bytes | None:
    try:
        return log_.read(offset, size)
    except OffsetOutOfRange:
        if offset < log_.first_offset:
            return None  # retention deleted its segment after we read the index
        raise
