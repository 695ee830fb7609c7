# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`fmq.server.net.answer_send`: a flush's gathered answers sent to
their sockets from C, all of them in ONE release of the interpreter lock.

uvloop's ``transport.write`` makes its ``write`` system call with the interpreter lock held,
one connection after another, so the threads waiting for the lock (the index writer, the
send acknowledger) wait out every one of them. Here each answer gets one ``send`` with
``MSG_DONTWAIT | MSG_NOSIGNAL`` (never blocks, never raises SIGPIPE) while the lock is
released once for all; the result is how many bytes each took (0 for EAGAIN or any error:
the caller hands the rest, or the whole answer, to the transport, which buffers it, or meets
the error itself and closes the connection as it always does).

The caller gives only plain TCP sockets whose transport holds nothing unsent, and owns them
(the event loop thread): no other thread writes to them meanwhile, and none is closed while
the lock is released here, because closing one takes the event loop.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.errno cimport EINTR, errno
from libc.stdlib cimport free, malloc

cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int sockfd, const void* buf, size_t length, int flags)
    int MSG_DONTWAIT
    int MSG_NOSIGNAL


def send_answers(fds, answers):
    """How many bytes of ``answers[i]`` went to the socket ``fds[i]`` (0: none, EAGAIN or an
    error the transport will meet again); every answer tried once, the interpreter lock
    released once for all of them."""
    cdef Py_ssize_t n = len(answers)
    cdef Py_ssize_t i, taken = 0
    cdef ssize_t r
    cdef int flags = MSG_DONTWAIT | MSG_NOSIGNAL
    cdef Py_buffer* bufs
    cdef int* cfds
    cdef ssize_t* sent
    if len(fds) != n:
        raise ValueError(f"send_answers: {len(fds)} sockets for {n} answers")
    if n == 0:
        return []
    bufs = <Py_buffer*>malloc(n * sizeof(Py_buffer))
    cfds = <int*>malloc(n * sizeof(int))
    sent = <ssize_t*>malloc(n * sizeof(ssize_t))
    if bufs == NULL or cfds == NULL or sent == NULL:
        free(bufs)
        free(cfds)
        free(sent)
        raise MemoryError()
    try:
        # Everything Python is read before the lock is released: the descriptors, and the
        # answers' bytes, held by their buffers until after the sends.
        for i in range(n):
            cfds[i] = fds[i]
        while taken < n:
            PyObject_GetBuffer(answers[taken], &bufs[taken], PyBUF_SIMPLE)
            taken += 1
        with nogil:
            for i in range(n):
                r = send(cfds[i], bufs[i].buf, <size_t>bufs[i].len, flags)
                while r < 0 and errno == EINTR:
                    r = send(cfds[i], bufs[i].buf, <size_t>bufs[i].len, flags)
                sent[i] = r if r > 0 else 0
        return [sent[i] for i in range(n)]
    finally:
        for i in range(taken):
            PyBuffer_Release(&bufs[i])
        free(bufs)
        free(cfds)
        free(sent)
