# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`fmq.index.item_batch`: the same items, their bytes written in C
(the reference packs each field with ``struct``, a Python call per field).

An entry whose fields are not what the index stores (an int outside its field, another type)
sends the whole batch to the reference, so the two return the same value or raise the same
error; tests/native compares them byte for byte.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy

from fmq.index.keys import TIME_EVERY


cdef inline void _be32(char* p, uint64_t v) noexcept:
    p[0] = <char>(v >> 24); p[1] = <char>(v >> 16); p[2] = <char>(v >> 8); p[3] = <char>v


cdef inline void _be64(char* p, uint64_t v) noexcept:
    cdef int i
    for i in range(7, -1, -1):
        p[i] = <char>v
        v >>= 8


cdef inline void _put(char* p, uint64_t v, int n) noexcept:
    """``v`` little-endian in ``n`` bytes (as ``_record_c._put``)."""
    cdef int i
    for i in range(n):
        p[i] = <char>v
        v >>= 8


cdef inline bytes _named(bytes name, Py_ssize_t rest):
    """A key of ``name`` NUL and ``rest`` bytes still to write (every key here starts so)."""
    cdef Py_ssize_t n = len(name)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n + 1 + rest)
    cdef char* p = PyBytes_AS_STRING(out)
    memcpy(p, PyBytes_AS_STRING(name), n)
    p[n] = 0
    return out


class _NotTaken(Exception):
    """An entry the C path does not take as it is: the reference decides."""


cdef inline uint64_t _u64(object v) except? 0xFFFFFFFFFFFFFFFF:
    """``v`` as an unsigned 64-bit int; anything else is unusual: the reference decides (it
    packs it or raises struct's error)."""
    if type(v) is not int and type(v) is not bool:
        raise _NotTaken()
    try:
        return <uint64_t>v
    except OverflowError:
        raise _NotTaken()


cdef inline int64_t _i64(object v) except? -1:
    if type(v) is not int and type(v) is not bool:
        raise _NotTaken()
    try:
        return <int64_t>v
    except OverflowError:
        raise _NotTaken()


def item_batch(list entries):
    try:
        return _batch(entries)
    except _NotTaken:
        from fmq.index import item_batch as reference
        return reference.item_batch(entries)


cdef uint64_t _U32_END = 1ULL << 32
cdef uint64_t _I64_END = 1ULL << 63
#: ``TIME_EVERY`` is a power of two: an offset with a ``time`` item has these bits clear.
cdef uint64_t _TIME_MASK = <uint64_t>TIME_EVERY - 1


cdef tuple _batch(list entries):
    cdef list cq = [], times = [], keys = [], keyoff = []
    cdef dict bounds = {}
    cdef bytes tname = b"", kname, ckey, cval, tkey, kkey, kval, skey
    cdef object last_topic = None
    cdef tuple t
    cdef char* p
    cdef Py_ssize_t n, kn
    cdef uint64_t qid, qoff, data_offset, data_size, tag_hash, source, when
    cdef int64_t store_time
    cdef list seen
    for e in entries:
        if not isinstance(e, tuple) or len(<tuple>e) != 9:
            raise _NotTaken()
        t = <tuple>e
        topic = t[0]
        key = t[7]
        if type(topic) is not str:
            raise _NotTaken()
        qid = _u64(t[1])
        qoff = _u64(t[2])
        data_offset = _u64(t[3])
        data_size = _u64(t[4])
        tag_hash = _u64(t[5])
        store_time = _i64(t[6])
        source = _u64(t[8])
        # u32 fields, and the queue offset: a signed field in the keys value
        if qid >= _U32_END or data_size >= _U32_END or tag_hash >= _U32_END or \
                qoff >= _I64_END:
            raise _NotTaken()
        if topic is not last_topic:  # one topic's entries usually follow each other
            try:
                tname = (<str>topic).encode("utf-8")
            except UnicodeEncodeError:
                raise _NotTaken()
            last_topic = topic
        n = len(tname)
        # cq: topic NUL, >I queue id, >Q queue offset -> <QIIqQ
        ckey = _named(tname, 12)
        p = PyBytes_AS_STRING(ckey) + n + 1
        _be32(p, qid)
        _be64(p + 4, qoff)
        cval = PyBytes_FromStringAndSize(NULL, 32)
        p = PyBytes_AS_STRING(cval)
        _put(p, data_offset, 8)
        _put(p + 8, data_size, 4)
        _put(p + 12, tag_hash, 4)
        _put(p + 16, <uint64_t>store_time, 8)
        _put(p + 24, source, 8)
        cq.append((ckey, cval))
        # time, every TIME_EVERY queue offsets: topic NUL, >I queue id, >Q store time (0 when
        # not positive), >Q queue offset
        if (qoff & _TIME_MASK) == 0:
            when = <uint64_t>store_time if store_time > 0 else 0
            tkey = _named(tname, 20)
            p = PyBytes_AS_STRING(tkey) + n + 1
            _be32(p, qid)
            _be64(p + 4, when)
            _be64(p + 12, qoff)
            times.append((tkey, b""))
        if key:
            if type(key) is not str:
                raise _NotTaken()
            try:
                kname = (<str>key).encode("utf-8")
            except UnicodeEncodeError:
                raise _NotTaken()
            kn = len(kname)
            # keys: topic NUL key NUL >Q source -> <Iq; keyoff: >Q source -> the keys key
            skey = PyBytes_FromStringAndSize(NULL, 8)
            _be64(PyBytes_AS_STRING(skey), source)
            kkey = _named(tname, kn + 9)
            p = PyBytes_AS_STRING(kkey) + n + 1
            memcpy(p, PyBytes_AS_STRING(kname), kn)
            p[kn] = 0
            _be64(p + kn + 1, source)
            kval = PyBytes_FromStringAndSize(NULL, 12)
            p = PyBytes_AS_STRING(kval)
            _put(p, qid, 4)
            _put(p + 4, qoff, 8)
            keys.append((kkey, kval))
            keyoff.append((skey, kkey))
        q = (topic, t[1])
        seen = bounds.get(q)
        if seen is None:
            bounds[q] = [t[2], qoff + 1]
        else:
            if qoff < <uint64_t>seen[0]:
                seen[0] = t[2]
            if qoff >= <uint64_t>seen[1]:
                seen[1] = qoff + 1
    return cq, times, keys, keyoff, bounds
