# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`fmq.log.flusher`: the flush thread's whole loop (wait for a
job, ``pwrite``, ``fdatasync``, add 1 to the eventfd) runs without the interpreter lock,
on a POSIX mutex and condition of its own.

The thread is a Python thread (so it has a name, and ``close`` joins it) whose body
releases the interpreter lock once, at its start, and takes it back only to return. The
job's buffer is held (a buffer export) from :meth:`Flusher.start` to
:meth:`Flusher.outcome`, so it cannot be resized meanwhile. Interrupted calls (EINTR) are
made again, as the ``os`` module's are (PEP 475).
"""

import os
import threading

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.errno cimport EINTR, errno
from libc.stdint cimport uint64_t
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from fmq.threadname import name_os_thread

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_mutex_init(pthread_mutex_t* mutex, void* attr)
    int pthread_mutex_destroy(pthread_mutex_t* mutex)
    int pthread_mutex_lock(pthread_mutex_t* mutex)
    int pthread_mutex_unlock(pthread_mutex_t* mutex)
    int pthread_cond_init(pthread_cond_t* cond, void* attr)
    int pthread_cond_destroy(pthread_cond_t* cond)
    int pthread_cond_wait(pthread_cond_t* cond, pthread_mutex_t* mutex)
    int pthread_cond_broadcast(pthread_cond_t* cond)

cdef extern from "<unistd.h>" nogil:
    ssize_t pwrite(int fd, const void* buf, size_t count, long long offset)
    ssize_t write(int fd, const void* buf, size_t count)
    ssize_t read(int fd, void* buf, size_t count)
    int fdatasync(int fd)

cdef enum:
    IDLE = 0
    QUEUED = 1
    RUNNING = 2
    DONE = 3

#: ``error`` of a write that wrote nothing (no errno): "pwrite wrote 0 bytes".
cdef int SHORT_WRITE = -1


cdef class Flusher:
    """The flush thread (started at once) and its eventfd (:attr:`fileno`)."""

    cdef pthread_mutex_t mutex
    cdef pthread_cond_t cond
    cdef int state
    cdef bint stopping
    cdef bint closed
    cdef int fd
    cdef const char* base
    cdef Py_ssize_t size
    cdef long long position
    cdef int error
    cdef long long ended
    cdef int event_fd
    cdef Py_buffer buf
    cdef bint holding
    cdef object thread

    def __cinit__(self, *args, **kwargs):
        pthread_mutex_init(&self.mutex, NULL)
        pthread_cond_init(&self.cond, NULL)
        self.state = IDLE
        self.event_fd = -1

    def __init__(self, name="fmq-flusher"):
        self.event_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def __dealloc__(self):
        if self.holding:
            PyBuffer_Release(&self.buf)
        pthread_cond_destroy(&self.cond)
        pthread_mutex_destroy(&self.mutex)

    @property
    def fileno(self):
        """Readable (a count above zero) once a job ended; the reader drains it."""
        return self.event_fd

    def start(self, int fd, data, long long position):
        """Write ``data`` at ``position`` of ``fd`` and fdatasync it, in the thread."""
        if self.state != IDLE or self.stopping:
            raise RuntimeError("a flush is under way (or the flusher is closed): take "
                               "its outcome before starting the next")
        PyObject_GetBuffer(data, &self.buf, PyBUF_SIMPLE)
        self.holding = True
        # The mutex is taken without releasing the interpreter lock: the thread holds it
        # only for a few instructions and never wants that lock, and a release here would
        # let another Python thread (the index writer) take the lock for its whole switch
        # interval before the loop got it back.
        pthread_mutex_lock(&self.mutex)
        self.fd = fd
        self.base = <const char*>self.buf.buf
        self.size = self.buf.len
        self.position = position
        self.error = 0
        self.state = QUEUED
        pthread_cond_broadcast(&self.cond)
        pthread_mutex_unlock(&self.mutex)

    @property
    def ended_ns(self):
        """When the last job's sync returned (or its write failed), on the monotonic clock
        (``time.monotonic_ns``): what the flush took, without the loop's wait to see it."""
        return self.ended

    def drain(self):
        """Read the eventfd's count (0 when it was not signalled), keeping the interpreter
        lock (the eventfd does not block: see start())."""
        cdef uint64_t count = 0
        if read(self.event_fd, &count, 8) != 8:
            return 0
        return count

    def busy(self):
        """A job was started and its outcome not taken yet."""
        return self.state != IDLE

    def done(self):
        """The job started ended (its outcome is ready)."""
        cdef int state
        pthread_mutex_lock(&self.mutex)  # the interpreter lock kept: see start()
        state = self.state
        pthread_mutex_unlock(&self.mutex)
        return state == DONE

    def outcome(self):
        """The ended job's failure (None: written and synced); the flusher is free again.
        Call only once :meth:`done`."""
        cdef int state, error
        pthread_mutex_lock(&self.mutex)  # the interpreter lock kept: see start()
        state = self.state
        error = self.error
        if state == DONE:
            self.state = IDLE
        pthread_mutex_unlock(&self.mutex)
        if state != DONE:
            raise RuntimeError("no flush has ended: wait for the eventfd or call wait()")
        if self.holding:
            self.holding = False
            PyBuffer_Release(&self.buf)
        if error == SHORT_WRITE:
            return OSError("pwrite wrote 0 bytes")
        if error:
            return OSError(error, os.strerror(error))
        return None

    def wait(self):
        """Block until the job under way ends; its :meth:`outcome` (None if none ran)."""
        cdef int state
        with nogil:
            pthread_mutex_lock(&self.mutex)
            while self.state == QUEUED or self.state == RUNNING:
                pthread_cond_wait(&self.cond, &self.mutex)
            state = self.state
            pthread_mutex_unlock(&self.mutex)
        if state != DONE:
            return None
        return self.outcome()

    def close(self):
        """Stop the thread (after the job under way, if any) and close the eventfd."""
        if self.closed:
            return
        self.closed = True
        with nogil:
            pthread_mutex_lock(&self.mutex)
            self.stopping = True
            pthread_cond_broadcast(&self.cond)
            pthread_mutex_unlock(&self.mutex)
        self.thread.join()
        os.close(self.event_fd)

    def _serve(self):
        name_os_thread()
        with nogil:
            self._run()

    cdef void _run(self) noexcept nogil:
        cdef Py_ssize_t done
        cdef ssize_t n
        cdef int err
        cdef uint64_t one = 1
        cdef timespec now
        while True:
            pthread_mutex_lock(&self.mutex)
            while self.state != QUEUED and not self.stopping:
                pthread_cond_wait(&self.cond, &self.mutex)
            if self.state != QUEUED:
                pthread_mutex_unlock(&self.mutex)
                return
            self.state = RUNNING
            pthread_mutex_unlock(&self.mutex)
            # The job's fields are the thread's alone while RUNNING.
            done = 0
            err = 0
            while done < self.size:
                n = pwrite(self.fd, self.base + done, <size_t>(self.size - done),
                           self.position + done)
                if n < 0:
                    if errno == EINTR:
                        continue
                    err = errno
                    break
                if n == 0:
                    err = SHORT_WRITE
                    break
                done += n
            if err == 0:
                while fdatasync(self.fd) != 0:
                    if errno != EINTR:
                        err = errno
                        break
            clock_gettime(CLOCK_MONOTONIC, &now)
            pthread_mutex_lock(&self.mutex)
            self.ended = now.tv_sec * 1000000000LL + now.tv_nsec
            self.error = err
            self.state = DONE
            pthread_cond_broadcast(&self.cond)
            pthread_mutex_unlock(&self.mutex)
            while write(self.event_fd, &one, 8) < 0 and errno == EINTR:
                pass
