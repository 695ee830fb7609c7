"""A flush's bytes written and made durable in one call: ``pwrite`` of all of them, then
``fdatasync`` of the file (:meth:`fmq.log.fileio.FileIO.write_then_sync`).

This module is the reference: two calls of the ``os`` module, each of which releases the
interpreter lock around its system call and takes it back after. Its compiled twin
``fmq.log._write_sync_c`` (``_write_sync_c.pyx``) makes both system calls in ONE release of
the lock. The thread that flushes (the send acknowledger) would otherwise take the lock back
between the write and the sync, and the event loop, busy with the next requests, holds it
most of the time: each take-back waited for the loop's turn to end. The bytes on disk, the
order of the calls and the errors raised are the same (tests/log/test_write_sync.py).
"""

from __future__ import annotations

import os


def write_then_sync(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """Write all of ``data`` at ``position`` of ``fd`` (short writes continued), then
    ``fdatasync(fd)``. Raises OSError for a failed write (nothing synced) or sync."""
    pwrite_all(fd, data, position)
    os.fdatasync(fd)


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> int:
    """Write all of ``data`` at ``position`` (loops over short writes); its length."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        n = os.pwrite(fd, view[done:], position + done)
        if n <= 0:
            raise OSError(f"pwrite wrote {n} bytes")
        done += n
    return done
