"""Undo the newest ``fmq log repair`` of a data dir with a crashing file I/O armed: SIGKILL
at the ``nth`` operation of any kind (renames, fsyncs, writes, the undo file's temp write
included), or an acknowledgement when the undo ended first.

``python -m tests.workloads.undo_crash DATA_DIR ACK_PATH PARAMS_JSON``; ``nth`` in the
parameters.
"""

from __future__ import annotations

import sys

from fmq.admin import repair_undo
from tests.crashkit import child_context


def main(argv: list[str]) -> None:
    child = child_context(argv)
    repair_undo.OS_IO = child.io  # every file operation of the undo goes through it
    child.io.arm("any", child.params["nth"], segments_only=False, include_tmp=True)
    done = repair_undo.undo_repair(child.broker_dir)
    child.ack(done=True, operations=child.io.total, restored=done.restored,
              derived=done.derived)


if __name__ == "__main__":
    main(sys.argv[1:])
