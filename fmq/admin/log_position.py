"""Whether a log offset an operator typed is where a record starts, and if not, what is near.

``fmq log dump --from`` and ``fmq log repair --cut-at`` take offsets copied from other
output; a mistyped one on a healthy log must be told apart from damage, so the answer names
the nearest record starts or the log end instead of reporting corruption.
"""

from __future__ import annotations

import bisect
import os

from fmq.datadir import LOG_DIR
from fmq.errors import InvalidArgument
from fmq.log.reader import OnCorruption
from fmq.log.record import FORMAT_MAX_RECORD
from fmq.log.scanner import LogScanner


class NotARecordStart(InvalidArgument):
    """An offset given on the command line is not where a record starts."""


def check_record_start(data_dir: str, offset: int) -> None:
    """Return when ``offset`` is where a record starts or where the log ends; raise
    :class:`NotARecordStart` naming the nearest record starts (or the log end) otherwise.
    Reads only the segment holding ``offset`` and what follows until the next record."""
    log_dir = os.path.join(data_dir, LOG_DIR)
    probe = LogScanner(log_dir, on_corruption=OnCorruption.SKIP, copy_body=False,
                       max_record_size=FORMAT_MAX_RECORD)
    bases = probe.bases
    if not bases:
        raise NotARecordStart(f"{offset} is past the end of the log (the log is empty)")
    segment_base = bases[max(bisect.bisect_right(bases, offset) - 1, 0)]
    scanner = LogScanner(log_dir, start_offset=segment_base, on_corruption=OnCorruption.SKIP,
                         copy_body=False, max_record_size=FORMAT_MAX_RECORD)
    before: int | None = None
    for rec in scanner:
        if rec.log_offset == offset or any(d.offset == offset for d in scanner.damages):
            return  # a record, or damage the reader will name itself
        if rec.log_offset > offset:
            if before is None:
                raise NotARecordStart(
                    f"{offset} is not a record start (the first record is at {rec.log_offset})")
            raise NotARecordStart(f"{offset} is not a record start (the nearest are {before} "
                                  f"and {rec.log_offset})")
        before = rec.log_offset
    end = scanner.end_offset
    if offset == end or any(d.offset == offset for d in scanner.damages):
        return
    if offset > end:
        raise NotARecordStart(f"{offset} is past the end of the log (ends at {end})")
    where = f"the nearest are {before} and {end} (the log end)" if before is not None \
        else f"the log ends at {end}"
    raise NotARecordStart(f"{offset} is not a record start ({where})")
