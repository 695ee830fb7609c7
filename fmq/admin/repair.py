"""The explicit repair step: cut the log at an offset an operator chose.

Recovery never cuts anything but a torn tail; after ``fmq log verify`` names corruption,
an operator may decide to cut there and lose what follows. The index is removed so that
the next open rebuilds it from what remains, and the checkpoint is removed because it may
point past the cut.
"""

from __future__ import annotations

import os

from fmq.datadir import CHECKPOINT_FILE, INDEX_DIR, LOG_DIR, DataDirLock, require_data_dir
from fmq.errors import InvalidArgument
from fmq.index.store import destroy
from fmq.log.log import Log
from fmq.log.reader import OnCorruption
from fmq.log.record import FORMAT_MAX_RECORD
from fmq.log.scanner import LogScanner


def cut_log(data_dir: str, offset: int) -> list[str]:
    """Cut the log of a stopped broker at ``offset`` (a record boundary)."""
    require_data_dir(data_dir)
    with DataDirLock(data_dir):
        log_dir = os.path.join(data_dir, LOG_DIR)
        boundaries = set()
        scanner = LogScanner(log_dir, on_corruption=OnCorruption.SKIP, copy_body=False,
                             max_record_size=FORMAT_MAX_RECORD)
        for rec in scanner:
            boundaries.add(rec.log_offset)
            if rec.log_offset >= offset:
                break
        boundaries.update(d.offset for d in scanner.damages)
        if offset not in boundaries and offset != scanner.end_offset:
            raise InvalidArgument(
                f"{offset} is not the offset of a record or of damage; use an offset "
                f"printed by `fmq log verify` or `fmq log dump`"
            )
        log = Log(log_dir, 1 << 20)
        try:
            deleted = log.truncate(offset)
        finally:
            log.close()
        destroy(os.path.join(data_dir, INDEX_DIR))
        try:
            os.unlink(os.path.join(data_dir, CHECKPOINT_FILE))
        except FileNotFoundError:
            pass
        return deleted
