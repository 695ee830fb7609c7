# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled twin of :mod:`fmq.protocol.framing`, written in Cython itself: the frame
splitter on every connection's receive path (the server's and the clients').

What the pure module does with a ``struct`` unpack per field, a ``Frame`` made through its
class's ``__init__`` and a view per payload, this does in C: the length prefix and the
header read through a typed pointer into the received bytes, a ``cdef class`` ``Frame``
filled without a call, and the bytes of a frame that has not all arrived kept in a growable
C buffer (freed once a large frame has gone: a connection that once sent 64 MiB does not
keep 64 MiB). The request budget (``admission``) is asked as the reference asks it: the
first frame of a read of ``admit``, the frames after it counted here against one ``room``
and taken together.

Whatever this code refuses it refuses through the same functions as the reference
(``frame_length`` for a length prefix, ``parse_frame`` for the header's flags), so the
errors are the same type with the same message; ``FrameTooLarge`` is the reference's class.
tests/native/test_framing_twins.py splits random streams, cut anywhere, with both and
compares the frames, the errors, the questions to the admission and what stays buffered.

A frame's payload: a copy (``bytes``) of up to :data:`COPY_LIMIT` bytes, a view of the
received bytes above that (the reference: always a view). A short copy costs less than a
view (made, then asked for its format by every decoder), and holds no reference to the
rest of the read; a large frame is not copied twice.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_FromUnsignedLongLong
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from fmq.errors import ProtocolError
from fmq.protocol.framing import (
    DEFAULT_MAX_FRAME,
    FLAG_ERROR,
    FLAG_RESPONSE,
    HEADER,
    HEADER_SIZE,
    KNOWN_FLAGS,
    LENGTH,
    PREFIX_SIZE,
    PROTOCOL_VERSION,
    FrameTooLarge,
)

__all__ = ["DEFAULT_MAX_FRAME", "FLAG_ERROR", "FLAG_RESPONSE", "HEADER", "HEADER_SIZE",
           "KNOWN_FLAGS", "LENGTH", "PREFIX_SIZE", "PROTOCOL_VERSION", "Frame",
           "FrameDecoder", "FrameTooLarge", "frame_length", "parse_frame", "COPY_LIMIT"]

#: Payloads up to this size are handed out as bytes of their own, larger ones as views.
COPY_LIMIT = 16 * 1024

cdef Py_ssize_t _PREFIX = 4
cdef Py_ssize_t _HEADER = 12
cdef unsigned int _KNOWN = 0x3
cdef Py_ssize_t _COPY_LIMIT = COPY_LIMIT
#: An emptied buffer larger than this is freed (one SMALL frame's worth stays allocated).
cdef Py_ssize_t _KEEP = 64 * 1024
cdef uint32_t _MAX_LENGTH = 0xFFFFFFFF


cdef inline uint32_t _u32(const uint8_t *p) noexcept:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


@cython.freelist(128)
cdef class Frame:
    """One received frame: the header's fields and the payload (its bytes, or a view of the
    received bytes valid while the frame is referenced)."""

    cdef public object version
    cdef public object opcode
    cdef public object flags
    cdef public object request_id
    cdef public object payload

    def __init__(self, version, opcode, flags, request_id, payload):
        self.version = version
        self.opcode = opcode
        self.flags = flags
        self.request_id = request_id
        self.payload = payload

    @property
    def is_response(self):
        return bool(self.flags & FLAG_RESPONSE)

    @property
    def is_error(self):
        return bool(self.flags & FLAG_ERROR)

    def __repr__(self):
        return (f"Frame(version={self.version}, opcode={self.opcode}, flags={self.flags}, "
                f"request_id={self.request_id}, payload={len(self.payload)} bytes)")


def frame_length(prefix, max_frame):
    """The length field of a frame (bytes that follow the prefix), checked against
    ``max_frame`` and the header size before anything is read or allocated."""
    (n,) = LENGTH.unpack_from(prefix, 0)
    if n < HEADER_SIZE:
        raise ProtocolError(f"frame length {n} is shorter than the {HEADER_SIZE}-byte header")
    if n > max_frame:
        raise FrameTooLarge(f"frame of {n} bytes exceeds the limit of {max_frame} bytes "
                            f"(max_frame_size): a single message must fit max_message_size, "
                            f"so send a smaller body; a batch must be split into smaller "
                            f"batches")
    return n


def parse_frame(body):
    """Split the bytes after the length prefix into header fields and payload."""
    if len(body) < HEADER_SIZE:
        raise ProtocolError(f"frame of {len(body)} bytes is shorter than the header")
    version, opcode, flags, request_id = HEADER.unpack_from(body, 0)
    if flags & ~KNOWN_FLAGS:
        raise ProtocolError(f"unknown frame flags 0x{flags:04x}")
    return Frame(version, opcode, flags, request_id, memoryview(body)[HEADER_SIZE:])


cdef class FrameDecoder:
    """Incremental parser: feed received bytes, get whole frames. Raises ProtocolError on a
    bad length (the stream cannot be resynchronised after that: close it).

    ``admission`` (:class:`fmq.protocol.framing.Admission`), when given to :meth:`feed`,
    admits each frame as soon as its length field is known, as the reference's
    :meth:`fmq.protocol.framing.FrameDecoder.feed` says."""

    cdef object _max_frame
    cdef long long _max_length  # the largest length taken without asking frame_length
    cdef char *_buf  # an incomplete frame's bytes
    cdef Py_ssize_t _len
    cdef Py_ssize_t _cap
    cdef Py_ssize_t _wanted  # bytes _buf must hold before a frame can complete
    cdef bint _head_admitted

    def __cinit__(self):
        self._buf = NULL
        self._len = self._cap = 0
        self._wanted = _PREFIX
        self._head_admitted = False

    def __init__(self, max_frame=DEFAULT_MAX_FRAME):
        self.max_frame = max_frame

    @property
    def max_frame(self):
        return self._max_frame

    @max_frame.setter
    def max_frame(self, value):
        # -1 for a max_frame that is no int: every length is then asked of frame_length,
        # which compares as the reference does (and raises its error, or lets it pass).
        self._max_length = (-1 if not isinstance(value, int) or value < 0
                            else min(value, _MAX_LENGTH))
        self._max_frame = value

    def __dealloc__(self):
        PyMem_Free(self._buf)

    cdef int _reserve(self, Py_ssize_t size) except -1:
        cdef char *grown
        if size <= self._cap:
            return 0
        if size < 2 * self._cap:
            size = 2 * self._cap
        grown = <char *>PyMem_Realloc(self._buf, size)
        if grown == NULL:
            raise MemoryError()
        self._buf = grown
        self._cap = size
        return 0

    cdef int _append(self, const char *p, Py_ssize_t n) except -1:
        self._reserve(self._len + n)
        memcpy(self._buf + self._len, p, n)
        self._len += n
        return 0

    cdef void _empty(self) noexcept:
        self._len = 0
        if self._cap > _KEEP:
            PyMem_Free(self._buf)
            self._buf = NULL
            self._cap = 0

    def feed(self, data, admission=None):
        cdef bytes src
        if self._len:
            if type(data) is not bytes:
                data = bytes(bytearray() + data)  # the reference's ``buf += data`` errors
            self._append(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
            if self._len < self._wanted:  # a large frame arriving in pieces: no copy yet
                return []
            src = PyBytes_FromStringAndSize(self._buf, self._len)
            self._empty()
        else:
            # Frames are parsed in place (a large payload is a view of these bytes), so
            # they must not change under us.
            src = data if type(data) is bytes else bytes(data)
        return self._split(src, admission)

    cdef list _split(self, bytes src, object admission):
        cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(src)
        cdef const uint8_t *q
        cdef Py_ssize_t end = PyBytes_GET_SIZE(src)
        cdef Py_ssize_t pos = 0, start, size
        cdef Py_ssize_t incomplete = 0  # the length of a frame whose bytes have not all arrived
        cdef uint32_t n
        cdef long long limit = self._max_length
        cdef unsigned int flags
        cdef list frames = []
        cdef Frame frame
        cdef object view = None  # made for the first payload handed out as a view
        cdef long long room = -1  # admission.room(), less what frames took; -1: not asked
        cdef long long taken = 0  # bytes admitted against room, not yet given to took()
        try:
            while end - pos >= _PREFIX:
                n = _u32(p + pos)
                if n < _HEADER or n > limit:
                    # Refused (its error), or a max_frame that is no int: the reference's test.
                    frame_length(src[pos:pos + _PREFIX], self.max_frame)
                if admission is not None and not self._head_admitted:
                    if room < 0 and frames:
                        room = admission.room()
                    if n <= room:
                        room -= n
                        taken += n
                    else:
                        if room > 0:
                            room = 0  # the rest of this read is asked frame by frame
                        if taken:
                            admission.took(taken)
                            taken = 0
                        if not admission.admit(n):
                            break
                    self._head_admitted = True
                start = pos + _PREFIX
                if end - start < n:
                    incomplete = n
                    break
                self._head_admitted = False
                q = p + start
                flags = (<unsigned int>q[2] << 8) | q[3]
                pos = start + n
                if flags & ~_KNOWN:
                    parse_frame(src[start:pos])  # raises its error
                frame = Frame.__new__(Frame)
                frame.version = q[0]
                frame.opcode = q[1]
                frame.flags = flags
                frame.request_id = PyLong_FromUnsignedLongLong(
                    (<uint64_t>_u32(q + 4) << 32) | _u32(q + 8))
                size = n - _HEADER
                if size <= _COPY_LIMIT:
                    frame.payload = PyBytes_FromStringAndSize(<const char *>q + _HEADER, size)
                else:
                    if view is None:
                        view = memoryview(src)
                    frame.payload = view[start + _HEADER:pos]
                frames.append(frame)
        finally:
            if taken:
                admission.took(taken)
        if pos < end:
            self._append(<const char *>p + pos, end - pos)
            self._wanted = _PREFIX + incomplete if incomplete else _PREFIX
        return frames

    @property
    def buffered(self):
        return self._len

    def discard(self):
        """Drop the bytes of an incomplete frame (nobody will send the rest: its connection
        ended); returns how many there were. Their memory is freed now."""
        dropped = self._len
        PyMem_Free(self._buf)
        self._buf = NULL
        self._len = self._cap = 0
        self._wanted = _PREFIX
        self._head_admitted = False
        return dropped
