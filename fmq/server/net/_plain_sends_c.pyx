# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`fmq.server.net.plain_sends`: a flush's plain sends answered
in one pass in C, each answer (its header and its packed results) framed by hand into its
session's buffer, which is written in one piece when the pass ends.

What the reference does with a ``struct`` pack and a ``bytearray`` per answer this does
with stores into a C buffer per session (grown as needed, freed once a large pass has
gone). Everything else (the owner's calls, the general way's requests, the order of the
writes, what a failure does) is the reference's, step for step:
tests/native/test_plain_answer_twins.py compares them.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from fmq.errors import FMQError
from fmq.message import PackedResults
from fmq.protocol.framing import FLAG_RESPONSE, HEADER_SIZE, PROTOCOL_VERSION
from fmq.protocol.schema import Op

cdef int _SEND = int(Op.SEND)
cdef int _SEND_BATCH = int(Op.SEND_BATCH)
cdef object _FMQError = FMQError
cdef Py_ssize_t _RESULT_SIZE = PackedResults.FORMAT.size
cdef Py_ssize_t _HEADER = HEADER_SIZE
cdef uint8_t _VERSION = PROTOCOL_VERSION
cdef unsigned int _FLAGS = FLAG_RESPONSE
#: An emptied buffer larger than this is freed (a pass's worth of small answers stays).
cdef Py_ssize_t _KEEP = 64 * 1024
cdef object _PackedResults = PackedResults
cdef object _part = PackedResults.part


cdef inline void _put_u32(uint8_t *p, uint32_t v) noexcept:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


@cython.final
cdef class PlainSends:
    """One session's plain sends: queued from its frames (:meth:`take`), counted while in
    flight (``count``) and, while :func:`answer_sends` runs, the answers framed for it and
    not written yet (:class:`fmq.server.net.plain_sends.PlainSends`)."""

    cdef public object owner
    #: Plain sends queued and not answered yet (they count against max_in_flight).
    cdef public Py_ssize_t count
    cdef uint8_t *_buf
    cdef Py_ssize_t _len
    cdef Py_ssize_t _cap
    cdef Py_ssize_t _ended
    cdef Py_ssize_t _size
    cdef bint _open
    cdef object _counters
    cdef object _batcher
    cdef object _check_one
    cdef object _check_many
    cdef object _check_limits
    cdef object _max_size
    cdef object _decode_send
    cdef object _decode_batch

    def __cinit__(self):
        self._buf = NULL
        self._len = self._cap = 0

    def __init__(self, owner, counters, batcher, broker, limits, decode_send, decode_batch):
        self.owner = owner
        self.count = 0
        self._ended = self._size = 0
        self._open = False
        self._counters = counters
        self._batcher = batcher
        self._check_one = broker.check_plain_message
        self._check_many = broker.check_messages
        self._check_limits = limits.check
        self._max_size = broker.config.max_message_size
        self._decode_send = decode_send
        self._decode_batch = decode_batch

    def take(self, frames, Py_ssize_t at, Py_ssize_t room):
        """Queue the plain SENDs and SEND_BATCHes of ``frames`` from ``at`` on in the send
        pipeline, while fewer than ``room`` are in flight; the index of the first frame not
        taken (:meth:`fmq.server.net.plain_sends.PlainSends.take`)."""
        cdef Py_ssize_t count = len(frames)
        cdef list queue = None
        cdef list msgs
        cdef Py_ssize_t sends = 0, batches = 0, received = 0, size
        cdef object max_size = self._max_size
        cdef object frame, op_object, rid, payload, message
        cdef int op
        try:
            while at < count and self.count < room:
                frame = frames[at]
                op_object = frame.opcode
                if op_object == _SEND:
                    op = _SEND
                elif op_object == _SEND_BATCH:
                    op = _SEND_BATCH
                else:
                    break
                rid = frame.request_id
                if frame.version != _VERSION or frame.flags & _FLAGS or rid == 0:
                    break
                payload = frame.payload
                try:
                    if op == _SEND:
                        message = self._decode_send(payload, max_size)
                        if message is None:
                            break
                        self._check_one(message)
                        msgs = [message]
                    else:
                        self._check_limits(frame)
                        message = self._decode_batch(payload, max_size)
                        if message is None or len(message) > self._batcher.max_batch_messages:
                            break
                        msgs = message
                        self._check_many(msgs)
                    if queue is None:
                        queue = self._batcher.plain_queue()
                except _FMQError:
                    break
                size = _HEADER + len(payload)
                queue.append((msgs, None, self, rid, op_object, size))
                self.count += 1
                received += size
                if op == _SEND:
                    sends += 1
                else:
                    batches += 1
                at += 1
        finally:
            if received:
                counters = self._counters
                counters.requests += sends + batches
                by_op = counters.by_op
                by_op[_SEND] += sends
                by_op[_SEND_BATCH] += batches
                self.owner.plain_received(received)
        return at

    def __dealloc__(self):
        PyMem_Free(self._buf)

    cdef int _frame(self, int op, object rid, const char *results, Py_ssize_t length,
                    Py_ssize_t n) except -1:
        cdef Py_ssize_t head = 4 + _HEADER + (0 if op == _SEND else 4)
        cdef Py_ssize_t need = self._len + head + length
        cdef uint8_t *grown
        cdef uint8_t *p
        cdef uint64_t r = rid  # a request id is a u64 (the frame's header held it)
        if need > self._cap:
            if need < 2 * self._cap:
                need = 2 * self._cap
            grown = <uint8_t *>PyMem_Realloc(self._buf, need)
            if grown == NULL:
                raise MemoryError()
            self._buf = grown
            self._cap = need
        p = self._buf + self._len
        _put_u32(p, <uint32_t>(head - 4 + length))
        p[4] = _VERSION
        p[5] = <uint8_t>op
        p[6] = <uint8_t>(_FLAGS >> 8)
        p[7] = <uint8_t>_FLAGS
        _put_u32(p + 8, <uint32_t>(r >> 32))
        _put_u32(p + 12, <uint32_t>r)
        if op != _SEND:
            _put_u32(p + 16, <uint32_t>n)
        memcpy(p + head, results, length)
        self._len += head + length
        return 0

    cdef bytes _take(self):
        cdef bytes data = PyBytes_FromStringAndSize(<const char *>self._buf, self._len)
        self._len = 0
        if self._cap > _KEEP:
            PyMem_Free(self._buf)
            self._buf = NULL
            self._cap = 0
        return data

    cdef int _flush(self) except -1:
        """Write what was framed so far (an answer written another way comes next)."""
        if self._len:
            self.owner.plain_written(self._take(), 0, 0)
        return 0

    cdef int _settle(self) except -1:
        """The pass ended: the answers written, the sends counted out, their bytes back."""
        cdef Py_ssize_t ended = self._ended, size = self._size
        self._open = False
        self._ended = self._size = 0
        self.count -= ended
        self.owner.plain_written(self._take(), ended, size)
        return 0


def answer_sends(requests, results, failure, general):
    """Answer a placed batch of sends: each gets its results (``results``, every request's
    in order, packed or a list) or ``failure``. Plain sends are framed into their
    sessions' answers, the others answered by ``general``
    (:func:`fmq.server.net.plain_sends.answer_sends`)."""
    cdef bytes packed = results.data if type(results) is _PackedResults else None
    cdef const char *data = PyBytes_AS_STRING(packed) if packed is not None else NULL
    cdef list touched = []
    cdef bint acknowledged = True
    cdef Py_ssize_t pos = 0, n
    cdef tuple item
    cdef PlainSends plain
    cdef int op
    try:
        for item in requests:
            n = len(item[0])
            if item[1] is not None:  # the general way's request
                for plain in touched:
                    plain._flush()
                if failure is not None:
                    general(item, None, failure)
                    continue
                general(item, results[pos:pos + n] if packed is None
                        else _part(packed, pos, n), None)
                pos += n
                continue
            plain = <PlainSends?>item[2]
            if not plain._open:
                plain._open = True
                if not touched:  # the role is the server's: asked once per pass
                    acknowledged = plain.owner.acknowledges()
                touched.append(plain)
            rid = item[3]
            op = item[4]
            plain._ended += 1
            plain._size += <Py_ssize_t>item[5]
            if failure is not None:
                plain._flush()
                plain.owner.plain_failed(op, rid, failure)
                continue
            if packed is not None and acknowledged:
                if (pos + n) * _RESULT_SIZE > PyBytes_GET_SIZE(packed):
                    raise IndexError("answer_sends: fewer packed results than messages")
                plain._frame(op, rid, data + pos * _RESULT_SIZE, n * _RESULT_SIZE, n)
            else:
                plain._flush()
                plain.owner.plain_results(op, rid, results[pos:pos + n] if packed is None
                                          else _part(packed, pos, n))
            pos += n
    finally:
        for plain in touched:
            plain._settle()
