"""One segment file: a preallocated, zero-filled file holding records back to back.

A segment is created under a temporary name, filled with zeros to its full size, fsync'd,
renamed to its final name and the directory fsync'd: a file with a segment name therefore
always has its full size, and zeros past the last record mean "no data yet". Writing into
already-allocated blocks lets ``fdatasync`` skip the metadata update a growing file needs.

Creating a segment can fail for want of a resource (no free file descriptor, a full disk)
before any record is in it. Such a failure raises :class:`~fmq.errors.SegmentUnavailable`
after removing what was created, so the log can refuse the append and try again later.
Any other error (EIO) stays a bare ``OSError``: the log treats it as a failed disk.
"""

from __future__ import annotations

import errno
import mmap
import os

from fmq.datadir import TEMP_SUFFIX, format_segment_name
from fmq.errors import SegmentUnavailable
from fmq.log.fileio import FileIO

_ZERO_CHUNK = bytes(1 << 20)

#: Errors that only say "no descriptor right now": open() raises them, fsync never does.
NO_DESCRIPTOR = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})
#: Errors of the temporary file or the rename that leave nothing behind once it is removed.
NO_RESOURCE = NO_DESCRIPTOR | {errno.ENOSPC, errno.EDQUOT}


class Segment:
    __slots__ = ("base", "size", "path", "fd", "io")

    def __init__(self, directory: str, base: int, size: int, fd: int, io: FileIO) -> None:
        self.base = base
        self.size = size
        self.path = os.path.join(directory, format_segment_name(base))
        self.fd = fd
        self.io = io

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def end(self) -> int:
        """Log offset just past the segment's capacity."""
        return self.base + self.size

    @classmethod
    def create(cls, directory: str, base: int, size: int, io: FileIO) -> Segment:
        return cls.install(directory, base, size, cls.prepare(directory, base, size, io), io)

    @staticmethod
    def prepare(directory: str, base: int, size: int, io: FileIO) -> int:
        """Create ``BASE.seg.tmp`` zero-filled to ``size`` and fsync'd; returns its fd.
        Slow (it writes the whole file), so the log does it ahead of time.

        Raises SegmentUnavailable (the temporary file removed) when a descriptor or disk
        space is missing; the temporary file is not part of the log, so nothing is lost."""
        tmp = os.path.join(directory, format_segment_name(base)) + TEMP_SUFFIX
        try:
            fd = io.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        except OSError as exc:
            _raise_if_resource(exc, tmp, NO_RESOURCE)
            raise
        try:
            position = 0
            while position < size:
                chunk = min(len(_ZERO_CHUNK), size - position)
                io.pwrite(fd, memoryview(_ZERO_CHUNK)[:chunk], position)
                position += chunk
            io.fsync(fd)
        except BaseException as exc:
            io.close(fd)
            _remove_quietly(io, tmp)  # a full disk gets its space back
            if isinstance(exc, OSError):
                _raise_if_resource(exc, tmp, NO_RESOURCE)
            raise
        return fd

    @classmethod
    def install(cls, directory: str, base: int, size: int, fd: int, io: FileIO) -> Segment:
        """Rename a prepared file to its segment name and fsync the directory (fast).

        Raises SegmentUnavailable (the file removed again) when the rename lacks space or
        the directory cannot be opened for its fsync. A failed directory *fsync* stays an
        OSError: retrying it could report success for an entry that never reached the disk."""
        final = os.path.join(directory, format_segment_name(base))
        try:
            io.rename(final + TEMP_SUFFIX, final)
        except BaseException as exc:
            io.close(fd)
            _remove_quietly(io, final + TEMP_SUFFIX)
            if isinstance(exc, OSError):
                _raise_if_resource(exc, final, NO_RESOURCE)
            raise
        try:
            io.fsync_dir(directory)
        except BaseException as exc:
            io.close(fd)
            if isinstance(exc, OSError) and exc.errno in NO_DESCRIPTOR:
                # Not in use yet and its name not made durable: drop it; the next attempt
                # creates it again, with its own directory fsync.
                _remove_quietly(io, final)
                _raise_if_resource(exc, final, NO_DESCRIPTOR)
            raise
        return cls(directory, base, size, fd, io)

    @classmethod
    def open(cls, directory: str, base: int, io: FileIO) -> Segment:
        path = os.path.join(directory, format_segment_name(base))
        fd = io.open(path, os.O_RDWR)
        size = os.fstat(fd).st_size
        return cls(directory, base, size, fd, io)

    def write(self, position: int, data: bytes | memoryview) -> None:
        self.io.pwrite(self.fd, data, position)

    def read(self, position: int, size: int) -> bytes:
        return self.io.pread(self.fd, size, position)

    def sync(self) -> None:
        self.io.fdatasync(self.fd)

    def write_then_sync(self, position: int, data: bytes | memoryview) -> None:
        """:meth:`write` then :meth:`sync`, in one call of the I/O."""
        self.io.write_then_sync(self.fd, data, position)

    def map(self) -> mmap.mmap | bytes:
        """A read-only view of the whole file (mmap; empty bytes for an empty file)."""
        if self.size == 0:
            return b""
        return mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ)

    def close(self) -> None:
        if self.fd >= 0:
            self.io.close(self.fd)
            self.fd = -1


def _raise_if_resource(exc: OSError, path: str, retriable: frozenset[int]) -> None:
    if exc.errno in retriable:
        raise SegmentUnavailable(path, exc) from exc


def _remove_quietly(io: FileIO, path: str) -> None:
    try:
        io.unlink(path)
    except OSError:  # absent, or the disk refuses even that: the next attempt truncates it
        pass
