"""Hold the LMDB writer lock of an index from another process, so the broker's dispatcher
waits (LMDB has one writer), until the parent closes this process's stdin.

``python -m tests.workloads.index_writer_holder INDEX_DIR``: prints ``holding`` once the
write transaction is open; aborts it (nothing written) when stdin reaches its end.
"""

from __future__ import annotations

import sys

import lmdb

#: More than the index has named databases: opening never fails for want of them.
MAX_DBS = 16


def main(argv: list[str]) -> None:
    [index_dir] = argv
    env = lmdb.open(index_dir, max_dbs=MAX_DBS)
    txn = env.begin(write=True)
    print("holding", flush=True)
    sys.stdin.read()
    txn.abort()


if __name__ == "__main__":
    main(sys.argv[1:])
