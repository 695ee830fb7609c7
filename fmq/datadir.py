"""The data directory: its layout, its lock, and the names of everything in it, in one place.

A data directory holds::

    LOCK            flock'ed by whoever may change the directory (a broker, an offline tool)
    checkpoint      the recovery checkpoint (written by temp file + rename)
    queue-floors    the lowest kept offset of each queue after retention
    log/            the segments, named by base log offset (``00000000000067108864.seg``),
                    zero-padded to 20 digits so that ``ls`` sorts them in log order
    index/          the LMDB index (``data.mdb``), rebuilt from the log when missing
    routes.json     a node in a cluster: its copy of the cluster's routes (docs/cluster.md)
    repair-*/       what ``fmq log repair`` cut and moved aside, for ``--undo``
    repair-undo     only while an undo puts a repair back (fmq.admin.repair)

Nothing here imports another FMQ package, so every layer may use it.
"""

from __future__ import annotations

import fcntl
import os
import re

from fmq.errors import DataDirLocked, StorageError

SEGMENT_SUFFIX = ".seg"
TEMP_SUFFIX = ".tmp"
_SEGMENT_RE = re.compile(r"^(\d{20})\.seg$")

LOG_DIR = "log"
INDEX_DIR = "index"
CHECKPOINT_FILE = "checkpoint"
QUEUE_FLOORS_FILE = "queue-floors"
ROUTES_FILE = "routes.json"
LOCK_FILE = "LOCK"
UNDO_FILE = "repair-undo"
#: The file LMDB keeps an environment in; its absence means "no index yet".
INDEX_DATA_FILE = "data.mdb"


def format_segment_name(base_offset: int) -> str:
    if base_offset < 0:
        raise ValueError("segment base offset must be >= 0")
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base offset of a segment file name, or None for any other file."""
    m = _SEGMENT_RE.match(name)
    return int(m.group(1)) if m else None


def index_exists(index_path: str) -> bool:
    """Whether an LMDB index has ever been created at ``index_path``."""
    return os.path.exists(os.path.join(index_path, INDEX_DATA_FILE))


class NotADataDir(StorageError):
    """A directory given to an offline tool is not an FMQ data directory."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(
            f"{path} is not an FMQ data directory ({why}); give the directory the server or "
            f"broker was started with (its --data-dir), which holds log/ with segment files")
        self.path = path


def refuse_unfinished_undo(path: str) -> None:
    """Raise StorageError when an undo of ``fmq log repair`` was interrupted in ``path``:
    its log is half put back, and a broker writing there would lose what is still to come
    back."""
    if os.path.exists(os.path.join(path, UNDO_FILE)):
        raise StorageError(
            f"an undo of `fmq log repair` was interrupted in {path} (it holds {UNDO_FILE}): "
            f"the log is only partly put back; finish it with `fmq log repair {path} --undo` "
            f"before opening the broker")



def require_data_dir(path: str) -> None:
    """Raise :class:`NotADataDir` unless ``path`` is an FMQ data directory: offline tools
    call this first so that they never create files in, nor report on, another directory."""
    why = _not_a_data_dir_reason(path)
    if why is not None:
        raise NotADataDir(path, why)


def _not_a_data_dir_reason(path: str) -> str | None:
    if not os.path.exists(path):
        return "it does not exist"
    if not os.path.isdir(path):
        return "it is not a directory"
    log_dir = os.path.join(path, LOG_DIR)
    if not os.path.isdir(log_dir):
        return "it has no log/ directory"
    try:
        names = os.listdir(log_dir)
    except OSError as exc:
        return f"cannot list its log/: {exc.strerror or exc}"
    has_segment = any(parse_segment_name(n) is not None for n in names)
    if not has_segment and not os.path.exists(os.path.join(path, LOCK_FILE)):
        return "its log/ holds no segment file and it has no LOCK file"
    return None


class DataDirLock:
    """The exclusive ``flock`` on ``DATA_DIR/LOCK``: one broker or one offline tool at a time.

    ``flock`` rather than a pid file: the kernel drops it when the holder dies, kill -9
    included, so a crash never leaves a stale lock for an operator to delete.
    """

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self._fd = -1

    def acquire(self) -> DataDirLock:
        """Take the lock or raise :class:`DataDirLocked` at once (never waits)."""
        fd = os.open(os.path.join(self.data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirLocked(self.data_dir) from None
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def __enter__(self) -> DataDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
