# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`fmq.log.write_sync`: a flush's ``pwrite`` and ``fdatasync`` in
one release of the interpreter lock (the reference takes the lock back between them).

The caller's buffer is held (a buffer export) for the call, so it cannot be resized meanwhile;
the group commit hands over only buffers no thread appends to any more. Interrupted calls
(EINTR) are made again, as the ``os`` module's are (PEP 475).
"""

import os

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.errno cimport EINTR, errno

cdef extern from "<unistd.h>" nogil:
    ssize_t pwrite(int fd, const void* buf, size_t count, long long offset)
    int fdatasync(int fd)


def write_then_sync(int fd, data, long long position):
    """Write all of ``data`` at ``position`` of ``fd`` (short writes continued), then
    ``fdatasync(fd)``. Raises OSError for a failed write (nothing synced) or sync."""
    cdef Py_buffer buf
    cdef const char* base
    cdef Py_ssize_t done = 0, size
    cdef ssize_t n = 1
    cdef int err = 0, rc
    PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)
    try:
        base = <const char*>buf.buf
        size = buf.len
        with nogil:
            while done < size:
                n = pwrite(fd, base + done, <size_t>(size - done), position + done)
                if n < 0:
                    if errno == EINTR:
                        continue
                    err = errno
                    break
                if n == 0:
                    break
                done += n
            if err == 0 and n != 0:
                while True:
                    rc = fdatasync(fd)
                    if rc == 0:
                        break
                    if errno != EINTR:
                        err = errno
                        break
    finally:
        PyBuffer_Release(&buf)
    if n == 0 and done < size:
        raise OSError(f"pwrite wrote {n} bytes")
    if err:
        raise OSError(err, os.strerror(err))
