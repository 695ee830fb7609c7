"""The file operations the log, the checkpoint and retention use, behind one object.

Production code uses :data:`OS_IO`. Tests pass their own subclass to ``Broker.open(...,
io=...)`` to count operations and crash (SIGKILL) at the N-th one, to fail with EIO or
ENOSPC, or to record unsynced writes for a simulated power cut. Every durability-relevant
step goes through here: writes, fdatasync, fsync, rename, directory fsync, unlink.
"""

from __future__ import annotations

import os

from fmq import native
from fmq.log import write_sync

#: ``write_then_sync(fd, data, position)``: the compiled twin (one release of the
#: interpreter lock for both system calls) or the pure one.
_WRITE_THEN_SYNC = native.choose(write_sync).write_then_sync


class FileIO:
    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pwrite(self, fd: int, data: bytes | memoryview, position: int) -> int:
        """Write all of ``data`` at ``position`` (loops over short writes)."""
        return write_sync.pwrite_all(fd, data, position)

    def pread(self, fd: int, size: int, position: int) -> bytes:
        return os.pread(fd, size, position)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    @property
    def plain(self) -> bool:
        """Whether a flush's write and sync are the system calls themselves: no subclass
        changes either step. Then they may be made in one call, or by another thread
        (:mod:`fmq.log.flusher`); a test's I/O that counts, fails or crashes them always
        sees both, in this order."""
        cls = type(self)
        return (cls.pwrite is FileIO.pwrite and cls.fdatasync is FileIO.fdatasync
                and cls.write_then_sync is FileIO.write_then_sync)

    def write_then_sync(self, fd: int, data: bytes | memoryview, position: int) -> None:
        """:meth:`pwrite` then :meth:`fdatasync`: a flush of one segment. Made in one call
        (:mod:`fmq.log.write_sync`) when the I/O is :attr:`plain`."""
        cls = type(self)
        if cls.pwrite is FileIO.pwrite and cls.fdatasync is FileIO.fdatasync:
            _WRITE_THEN_SYNC(fd, data, position)
        else:
            self.pwrite(fd, data, position)
            self.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_file_atomically(self, path: str, data: bytes) -> None:
        """temp file, write, fsync, rename over ``path``, fsync the directory."""
        tmp = path + ".tmp"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            self.pwrite(fd, data, 0)
            self.fsync(fd)
        finally:
            self.close(fd)
        self.rename(tmp, path)
        self.fsync_dir(os.path.dirname(os.path.abspath(path)))


OS_IO = FileIO()
