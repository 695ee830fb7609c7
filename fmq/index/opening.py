"""Opening the index's LMDB environment: the check that the data file is as long as its
meta page says, and the index format (a new index, this version's, or an older one that
is rebuilt from the log).
"""

from __future__ import annotations

import os

import lmdb

from fmq.datadir import INDEX_DATA_FILE
from fmq.errors import IndexCorrupt, IndexUnavailable
from fmq.index.lmdb_env import DERIVED_DBS, FORMAT, OFFSETS_IN_LOG, Databases

INDEX_FORMAT = b"fmq-index-3"
#: LMDB's lock file (its reader table), which it maps into memory.
INDEX_LOCK_FILE = "lock.mdb"
#: Bytes of the lock file given disk blocks before LMDB maps it: LMDB sizes a new one
#: sparsely, and the first touch of a page no block backs, on a full disk, kills the
#: process with SIGBUS. 126 readers (LMDB's default) take under 9 KiB.
LOCK_FILE_RESERVE = 64 * 1024
#: Older formats, rebuilt from the log when opened: ``fmq-index-1`` keyed ``txends`` by
#: transaction id alone; ``fmq-index-2`` held a ``time`` item for every queue entry (this
#: format holds one every ``keys.TIME_EVERY``, and its trims delete only those: an older
#: index kept would keep the others of every entry retention removes).
_REBUILT_FORMATS = (b"fmq-index-1", b"fmq-index-2")


def open_env(path: str, map_size: int, verify_length: bool = True, create: bool = True
             ) -> tuple[lmdb.Environment, Databases, bool]:
    """The environment at ``path`` (created if missing), its named databases, and whether
    it has an older format this version rebuilds from the log. Raises IndexCorrupt when it
    cannot be used (it is then rebuilt from the log). ``verify_length=False``: skip the
    data file's length check, for a second process opening an index the broker opened
    and checked already (while the broker writes, LMDB's last page may lie past the end of
    the file: pages it allocated but did not write). ``create=False``: a missing index is
    an IndexCorrupt, not a new empty one (that second process must write the broker's
    index or none)."""
    if create:
        os.makedirs(path, exist_ok=True)
        _reserve_lock_file(path)
    try:
        env = lmdb.open(path, map_size=map_size, max_dbs=len(DERIVED_DBS) + 2,
                        sync=False, metasync=False, readahead=False, create=create)
        # A file shorter than its meta page says (a power cut lost the extension, or a
        # truncation) would kill the process with SIGBUS on the first page read.
        pages = env.info()["last_pgno"] + 1
        needed = pages * env.stat()["psize"]
        have = os.path.getsize(os.path.join(path, INDEX_DATA_FILE))
        if verify_length and have < needed:
            env.close()
            raise IndexCorrupt(f"index file at {path} has {have} bytes, its meta page "
                               f"needs {needed}; it will be rebuilt from the log")
        db = Databases.open(env)
        outdated = False
        with env.begin() as txn:
            fmt = txn.get(FORMAT, db=db.meta)
        if fmt is None and not create:
            env.close()
            raise IndexCorrupt(f"index at {path} has no format: it is not the index the "
                               f"broker opened")
        if fmt is None:  # a new index: its consumer offsets come from the log
            with env.begin(write=True) as txn:
                txn.put(FORMAT, INDEX_FORMAT, db=db.meta)
                txn.put(OFFSETS_IN_LOG, b"1", db=db.meta)
        elif fmt in _REBUILT_FORMATS:
            outdated = True
        elif fmt != INDEX_FORMAT:
            raise IndexCorrupt(f"index at {path} has format {fmt!r}, expected {INDEX_FORMAT!r}")
    except lmdb.Error as exc:
        raise IndexCorrupt(
            f"cannot open the LMDB index at {path}: {exc}; it will be rebuilt from the log"
        ) from exc
    return env, db, outdated


def _reserve_lock_file(path: str) -> None:
    """Give a new lock file its disk blocks now, so that a full disk is a clear error here
    and not a SIGBUS inside LMDB (an existing lock file has its blocks)."""
    lock = os.path.join(path, INDEX_LOCK_FILE)
    if os.path.exists(lock) or not hasattr(os, "posix_fallocate"):
        return
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, LOCK_FILE_RESERVE)
    except OSError as exc:
        os.close(fd)
        os.unlink(lock)
        raise IndexUnavailable(
            f"cannot create the index at {path}: {exc.strerror} (its lock file needs "
            f"{LOCK_FILE_RESERVE // 1024} KiB); free space on that file system, then open "
            f"again") from exc
    os.close(fd)
