# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twins of two functions of the record codec (:func:`fmq.log.record.codec.python_codec`)
that run once per record: ``encode_into``, which the event loop calls for every message it
places, and ``decode_at``, which every scan of the log calls (recovery's redo, the index
writers, replication, reads). The header is written and read in C, the fields copied
straight between the buffer and the record, where the reference packs or unpacks a 19-field
tuple and slices every field.

Each takes what its reference takes; whenever a check fails, or an argument is not what the C
path handles as it is (another buffer type, a number out of range, properties), it calls the
reference (before changing anything), which returns the same result or raises its error: the
two always give the same bytes or record, or the same error (type and message).
tests/log/test_twins.py and tests/native compare them. A stored record's header checks and
the CRC-32C are ``_record_header.pxd``'s, shared with the Kafka door's Fetch batches
(fmq/server/kafka/_stored_batches_c.pyx).
"""

import mmap

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from fmq.log.record._record_header cimport (
    RecordFormat,
    checked_length,
    crc_after_field,
    crc_in_c,
    fmq_crc32c_sse42,
    le,
    record_format,
)

from fmq.log.record.runs import encode_message_run, encode_tx_run
from fmq.message import Message as _Message
from fmq.log.record.layout import (
    FORMAT_MAX_RECORD,
    FORMAT_VERSION,
    HEADER_SIZE,
    MAGIC,
    MAX_SHORT_FIELD,
    TYPE_BY_CODE,
    Record,
    RecordType,
    decode_properties,
    encode_properties,
)
from fmq.log.record.queue_entry import QueueEntry

cdef extern from "Python.h":
    ctypedef struct PyByteArrayObject:
        Py_ssize_t ob_alloc
    bint PyUnicode_IS_COMPACT_ASCII(object text)
    void *PyUnicode_DATA(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)

cdef Py_ssize_t _HEADER = HEADER_SIZE
cdef uint32_t _MAGIC = MAGIC
cdef uint32_t _VERSION = FORMAT_VERSION
cdef object _new_record = object.__new__
cdef list _TYPES = [TYPE_BY_CODE.get(code) for code in range(256)]
cdef RecordFormat _FORMAT
record_format(&_FORMAT, HEADER_SIZE, MAGIC, FORMAT_VERSION, TYPE_BY_CODE)
cdef object _FILLER = RecordType.FILLER
cdef int _MESSAGE_CODE = RecordType.MESSAGE
cdef int _FILLER_CODE = RecordType.FILLER
cdef object _new_tuple = tuple.__new__
#: The entry of a plain message: built as ``_new_tuple(_QUEUE_ENTRY, (...))``, in its
#: fields' order, as ``runs.py`` builds it (a C global, as cheap as the argument it was).
cdef object _QUEUE_ENTRY = QueueEntry
cdef Py_ssize_t _SHORT = MAX_SHORT_FIELD
cdef uint64_t _MAX_RECORD = FORMAT_MAX_RECORD


cdef inline void _put(unsigned char* p, uint64_t v, int n) noexcept:
    cdef int i
    for i in range(n):
        p[i] = <unsigned char>v
        v >>= 8


cdef inline unsigned char* _copy(unsigned char* p, bytes field) noexcept:
    """``field`` copied to ``p``; returns where the next field goes."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(field)
    memcpy(p, PyBytes_AS_STRING(field), n)
    return p + n


cdef inline bint _flat_bytes(object obj):
    """Bytes the C paths read as they are: bytes, bytearray, a one-dimensional view of
    bytes (not a view of wider items, whose length counts items)."""
    kind = type(obj)
    return (kind is bytes or kind is bytearray or
            (kind is memoryview and obj.format == "B" and obj.ndim == 1))


cdef inline bytes _utf8(object text):
    """``text.encode()`` of a str, as the reference does; anything else is not taken."""
    if type(text) is not str:
        raise _NotTaken()
    return (<str>text).encode("utf-8")


class _NotTaken(Exception):
    """What the C path does not take as it is: the reference decides."""


cdef bytes _properties(object properties):
    """``encode_properties(properties)``: written here for a dict of ASCII strings (a
    message's usual properties, each string's characters its bytes), else by the reference
    (which raises its error for what it refuses). The reference's call cost about as much
    as the rest of a 1 KiB message's encoding."""
    cdef Py_ssize_t size = 2
    cdef unsigned char *out
    cdef bytes encoded
    if type(properties) is not dict or len(<dict>properties) > _SHORT:
        return encode_properties(properties)
    for name, value in (<dict>properties).items():
        if (type(name) is not str or type(value) is not str
                or not PyUnicode_IS_COMPACT_ASCII(name) or not PyUnicode_IS_COMPACT_ASCII(value)
                or PyUnicode_GET_LENGTH(name) > _SHORT or PyUnicode_GET_LENGTH(value) > _SHORT):
            return encode_properties(properties)
        size += 4 + PyUnicode_GET_LENGTH(name) + PyUnicode_GET_LENGTH(value)
    encoded = PyBytes_FromStringAndSize(NULL, size)
    out = <unsigned char *>PyBytes_AS_STRING(encoded)
    _put(out, <uint64_t>len(<dict>properties), 2)
    out += 2
    for name, value in (<dict>properties).items():
        out = _put_text(out, name)
        out = _put_text(out, value)
    return encoded


cdef inline unsigned char *_put_text(unsigned char *out, object text) noexcept:
    """An ASCII string's u16 length and bytes at ``out``; returns where the next goes."""
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    _put(out, <uint64_t>n, 2)
    memcpy(out + 2, PyUnicode_DATA(text), n)
    return out + 2 + n


cdef inline object _int(object v):
    """An int (a RecordType included) for a header field; struct takes others (anything
    with ``__index__``) and refuses floats: the reference decides those."""
    if not isinstance(v, int):
        raise _NotTaken()
    return v


cdef unsigned char* _header(unsigned char* out, uint64_t length, uint8_t rtype,
                            uint64_t log_offset, int64_t store_time, int32_t queue_id,
                            int64_t queue_offset, int64_t ref_offset, uint64_t ref_size,
                            Py_ssize_t lt, Py_ssize_t lx, Py_ssize_t lg, Py_ssize_t lk,
                            Py_ssize_t la, Py_ssize_t lp, Py_ssize_t lb) noexcept:
    """The header at ``out`` with a zero CRC (written last, over the whole record);
    returns where the fields go."""
    _put(out, length, 4)
    _put(out + 4, 0, 4)
    _put(out + 8, _MAGIC, 2)
    out[10] = <unsigned char>_VERSION
    out[11] = rtype
    _put(out + 12, log_offset, 8)
    _put(out + 20, <uint64_t>store_time, 8)
    _put(out + 28, <uint64_t><uint32_t>queue_id, 4)
    _put(out + 32, <uint64_t>queue_offset, 8)
    _put(out + 40, <uint64_t>ref_offset, 8)
    _put(out + 48, ref_size, 4)
    _put(out + 52, lt, 2)
    _put(out + 54, lx, 2)
    _put(out + 56, lg, 2)
    _put(out + 58, lk, 2)
    _put(out + 60, la, 2)
    _put(out + 62, 0, 2)
    _put(out + 64, lp, 4)
    _put(out + 68, lb, 4)
    return out + _HEADER


cdef class EncodeInto:
    """``encode_into(buf, offset, record)`` with the CRC function the codec was built with
    and the reference ``encode_into`` of that codec."""

    cdef object crc32c
    cdef bint crc_in_c
    cdef object reference

    def __init__(self, crc32c, reference):
        self.crc32c = crc32c
        self.reference = reference
        self.crc_in_c = crc_in_c(crc32c)

    def message_run(self, buf, room, log_offset, store_time, messages, queue_ids,
                    queue_offsets, start, stop, out):
        """:func:`fmq.log.record.runs.encode_message_run` (without its two functions: this
        encoder's own), message by message in C; a message it does not take as it is goes
        to that reference alone, so both give the same bytes, entries and errors."""
        cdef Py_ssize_t i, n, left, written
        cdef uint64_t offset
        cdef int64_t stamp
        try:
            if (type(buf) is not bytearray or type(messages) is not list
                    or type(queue_ids) is not list or type(queue_offsets) is not list
                    or type(out) is not list or type(start) is not int
                    or type(stop) is not int or type(room) is not int
                    or type(log_offset) is not int or type(store_time) is not int):
                raise _NotTaken()
            if (start < 0 or stop > len(messages) or stop > len(queue_ids)
                    or stop > len(queue_offsets) or log_offset < 0 or log_offset >= 1 << 62
                    or room >= 1 << 62):
                raise _NotTaken()
            i, n, left, offset, stamp = start, stop, max(room, -1), log_offset, store_time
        except (_NotTaken, OverflowError):
            return encode_message_run(self.reference, self.crc32c, buf, room, log_offset,
                                      store_time, messages, queue_ids, queue_offsets, start,
                                      stop, out)
        while i < n:
            written = self._message(buf, offset, stamp, store_time, (<list>messages)[i],
                                    (<list>queue_ids)[i], (<list>queue_offsets)[i], left,
                                    out)
            if written == 0:  # it does not fit
                return i
            if written < 0:  # not taken as it is: the reference, for this message alone
                if encode_message_run(self.reference, self.crc32c, buf, left, offset,
                                      store_time, messages, queue_ids, queue_offsets, i,
                                      i + 1, out) == i:
                    return i
                written = <Py_ssize_t>((<tuple>(<list>out)[len(out) - 1])[0] - offset)
            left -= written
            offset += <uint64_t>written
            i += 1
        return i

    cdef Py_ssize_t _message(self, bytearray buf, uint64_t offset, int64_t stamp,
                             object store_time, object m, object queue_id_obj,
                             object queue_offset_obj, Py_ssize_t left,
                             list out) except -2:
        """Encode message ``m`` at the end of ``buf`` and append its entry to ``out``:
        returns its size; 0 when it does not fit in ``left`` bytes, -1 when the C path does
        not take it as it is (both leave ``buf`` and ``out`` as they were)."""
        cdef Py_ssize_t lt, lk, la, lp, lb
        cdef uint64_t length
        cdef int32_t queue_id
        cdef int64_t queue_offset
        cdef uint32_t tag_hash
        try:
            if type(m) is not _Message:
                raise _NotTaken()
            queue_id = _int(queue_id_obj)
            queue_offset = _int(queue_offset_obj)
            key_text = m.key or None
            tags_text = m.tags or None
            topic = _utf8(m.topic)
            key = _utf8(key_text) if key_text is not None else b""
            tags = _utf8(tags_text) if tags_text is not None else b""
            props = _properties(m.properties) if m.properties else b""
            body = m.body
            if not _flat_bytes(body):
                raise _NotTaken()
        except Exception:  # noqa - the reference raises the same, or takes it
            return -1
        lt = PyBytes_GET_SIZE(topic)
        lk = PyBytes_GET_SIZE(key)
        la = PyBytes_GET_SIZE(tags)
        lp = PyBytes_GET_SIZE(props)
        lb = len(body)
        if lt > _SHORT or lk > _SHORT or la > _SHORT:
            return -1
        length = <uint64_t>(_HEADER + lt + lk + la + lp + lb)
        if length > _MAX_RECORD:
            return -1
        if <Py_ssize_t>length > left:
            return 0
        if la == 0:
            tag_hash = 0
        elif self.crc_in_c:
            tag_hash = fmq_crc32c_sse42(<const unsigned char*>PyBytes_AS_STRING(tags), la)
        else:
            tag_hash = self.crc32c(tags)
        entry = (offset + length, _new_tuple(_QUEUE_ENTRY, (
            m.topic, queue_id_obj, queue_offset_obj, offset, length, tag_hash, store_time,
            key_text, offset)))
        if self._put_record(buf, PyByteArray_GET_SIZE(buf), length, _MESSAGE_CODE, offset,
                            stamp, queue_id, queue_offset, -1, 0, topic, b"", b"", key, tags,
                            props, body, lb) < 0:
            return -1
        out.append(entry)
        return <Py_ssize_t>length

    def tx_run(self, buf, room, log_offset, store_time, tx_id, producer_group, records,
               start, stop, out):
        """:func:`fmq.log.record.runs.encode_tx_run` (without its encoder: this one), record
        by record in C, the transaction id and group encoded once; a record it does not
        take as it is goes to that reference alone, so both give the same bytes, offsets
        and errors."""
        cdef Py_ssize_t i, n, left, written
        cdef uint64_t offset
        cdef int64_t stamp
        try:
            if (type(buf) is not bytearray or type(records) is not list
                    or type(out) is not list or type(start) is not int
                    or type(stop) is not int or type(room) is not int
                    or type(log_offset) is not int or type(store_time) is not int):
                raise _NotTaken()
            if (start < 0 or stop > len(records) or log_offset < 0 or log_offset >= 1 << 62
                    or room >= 1 << 62):
                raise _NotTaken()
            tx = _utf8(tx_id)
            group = _utf8(producer_group)
            if PyBytes_GET_SIZE(tx) > _SHORT or PyBytes_GET_SIZE(group) > _SHORT:
                raise _NotTaken()
            i, n, left, offset, stamp = start, stop, max(room, -1), log_offset, store_time
        except Exception:  # noqa - e.g. a text that is not UTF-8: the reference decides
            return encode_tx_run(self.reference, buf, room, log_offset, store_time, tx_id,
                                 producer_group, records, start, stop, out)
        while i < n:
            written = self._tx_record(buf, offset, stamp, <bytes>tx, <bytes>group,
                                      (<list>records)[i], left)
            if written == 0:  # it does not fit
                return i
            if written < 0:  # not taken as it is: the reference, for this record alone
                if encode_tx_run(self.reference, buf, left, offset, store_time, tx_id,
                                 producer_group, records, i, i + 1, out) == i:
                    return i
                written = <Py_ssize_t>((<tuple>(<list>out)[len(out) - 1])[1])
            else:
                out.append((offset, written))
            left -= written
            offset += <uint64_t>written
            i += 1
        return i

    cdef Py_ssize_t _tx_record(self, bytearray buf, uint64_t offset, int64_t stamp,
                               bytes tx, bytes group, object spec, Py_ssize_t left
                               ) except -2:
        """Encode the transaction record ``spec`` (``runs.TX_RECORD_FIELDS``) at the end of
        ``buf``: returns its size; 0 when it does not fit in ``left`` bytes, -1 when the C
        path does not take it as it is (both leave ``buf`` as it was)."""
        cdef Py_ssize_t lt, lx, lg, lk, la, lp, lb
        cdef uint64_t length, ref_size
        cdef int32_t queue_id
        cdef int64_t queue_offset, ref_offset
        cdef uint8_t rtype
        try:
            if type(spec) is not tuple or len(<tuple>spec) != 10:
                raise _NotTaken()
            (rtype_obj, queue_id_obj, queue_offset_obj, ref_offset_obj, ref_size_obj,
             topic_text, key_text, tags_text, properties, body) = <tuple>spec
            topic = _utf8(topic_text)
            key = _utf8(key_text) if key_text else b""
            tags = _utf8(tags_text) if tags_text else b""
            props = _properties(properties) if properties else b""
            if not _flat_bytes(body):
                raise _NotTaken()
            rtype = _int(rtype_obj)
            queue_id = _int(queue_id_obj)
            queue_offset = _int(queue_offset_obj)
            ref_offset = _int(ref_offset_obj)
            ref_size = _int(ref_size_obj)
            if ref_size > 0xFFFFFFFF:
                raise _NotTaken()
        except Exception:  # noqa - the reference raises the same, or takes it
            return -1
        lt = PyBytes_GET_SIZE(topic)
        lx = PyBytes_GET_SIZE(tx)
        lg = PyBytes_GET_SIZE(group)
        lk = PyBytes_GET_SIZE(key)
        la = PyBytes_GET_SIZE(tags)
        lp = PyBytes_GET_SIZE(props)
        lb = len(body)
        if lt > _SHORT or lk > _SHORT or la > _SHORT:
            return -1
        length = <uint64_t>(_HEADER + lt + lx + lg + lk + la + lp + lb)
        if length > _MAX_RECORD:
            return -1
        if <Py_ssize_t>length > left:
            return 0
        if self._put_record(buf, PyByteArray_GET_SIZE(buf), length, rtype, offset, stamp,
                            queue_id, queue_offset, ref_offset, ref_size, topic, tx, group,
                            key, tags, props, body, lb) < 0:
            return -1
        return <Py_ssize_t>length

    def __call__(self, buf, offset, record):
        cdef Py_ssize_t at
        cdef Py_ssize_t lt, lx, lg, lk, la, lp, lb
        cdef uint64_t length, log_offset, ref_size
        cdef int64_t store_time, queue_offset, ref_offset
        cdef int32_t queue_id
        cdef uint8_t rtype
        if type(buf) is not bytearray or type(offset) is not int or type(record) is not Record:
            return self.reference(buf, offset, record)
        # Everything is read and checked before the buffer changes: whatever is not taken
        # goes to the reference with the buffer as it was.
        try:
            at = offset
            if at < 0 or at > PyByteArray_GET_SIZE(buf):  # past the end: zero-filled, rare
                raise _NotTaken()
            topic = _utf8(record.topic)
            tx_id = _utf8(record.tx_id)
            group = _utf8(record.producer_group)
            key = _utf8(record.key) if record.key else b""
            tags = _utf8(record.tags) if record.tags else b""
            props = _properties(record.properties) if record.properties else b""
            body = record.body
            if not _flat_bytes(body):
                raise _NotTaken()
            rtype = _int(record.type)
            log_offset = _int(record.log_offset)
            store_time = _int(record.store_time)
            queue_id = _int(record.queue_id)
            queue_offset = _int(record.queue_offset)
            ref_offset = _int(record.ref_offset)
            ref_size = _int(record.ref_size)
            if ref_size > 0xFFFFFFFF:
                raise _NotTaken()
        except Exception:  # noqa - the reference raises the same, or takes it
            return self.reference(buf, offset, record)
        lt = PyBytes_GET_SIZE(topic)
        lx = PyBytes_GET_SIZE(tx_id)
        lg = PyBytes_GET_SIZE(group)
        lk = PyBytes_GET_SIZE(key)
        la = PyBytes_GET_SIZE(tags)
        lp = PyBytes_GET_SIZE(props)
        lb = len(body)
        if lt > _SHORT or lx > _SHORT or lg > _SHORT or lk > _SHORT or la > _SHORT:
            return self.reference(buf, offset, record)
        length = <uint64_t>(_HEADER + lt + lx + lg + lk + la + lp + lb)
        if length > _MAX_RECORD:
            return self.reference(buf, offset, record)
        if self._put_record(buf, at, length, rtype, log_offset, store_time, queue_id,
                            queue_offset, ref_offset, ref_size, topic, tx_id, group, key, tags,
                            props, body, lb) < 0:
            return self.reference(buf, offset, record)
        record.size = length
        return length

    cdef Py_ssize_t _put_record(self, bytearray buf, Py_ssize_t at, uint64_t length,
                                uint8_t rtype, uint64_t log_offset, int64_t store_time,
                                int32_t queue_id, int64_t queue_offset, int64_t ref_offset,
                                uint64_t ref_size, bytes topic, bytes tx, bytes group,
                                bytes key, bytes tags, bytes props, object body,
                                Py_ssize_t lb) except -2:
        """The bytes of one record (``length`` of them, its fields encoded and measured by
        the caller) written at ``at`` of ``buf``, which grows to hold them: header, fields,
        body, CRC; what a single record, a message run and a transaction run share.
        Returns 0, or -1 when the C path does not take it as it is (a body that is not one
        flat buffer of ``lb`` bytes, ``buf`` exported): ``buf`` is then as it was, and no
        view of the body is held when the caller hands the record to its reference."""
        cdef Py_buffer body_view
        cdef unsigned char* out
        cdef unsigned char* p
        cdef Py_ssize_t end = at + <Py_ssize_t>length
        try:
            PyObject_GetBuffer(body, &body_view, PyBUF_SIMPLE)
        except (BufferError, ValueError, TypeError):  # e.g. a view with gaps, or released
            return -1
        try:
            if body_view.len != lb:  # cannot differ for these types; never copy past a view
                return -1
            if end > PyByteArray_GET_SIZE(buf):
                try:
                    _grow(buf, end)
                except BufferError:  # exported: the reference raises the same
                    return -1
            out = <unsigned char*>PyByteArray_AS_STRING(buf) + at
            p = _header(out, length, rtype, log_offset, store_time, queue_id, queue_offset,
                        ref_offset, ref_size, PyBytes_GET_SIZE(topic), PyBytes_GET_SIZE(tx),
                        PyBytes_GET_SIZE(group), PyBytes_GET_SIZE(key),
                        PyBytes_GET_SIZE(tags), PyBytes_GET_SIZE(props), lb)
            p = _copy(p, topic)
            p = _copy(p, tx)
            p = _copy(p, group)
            p = _copy(p, key)
            p = _copy(p, tags)
            p = _copy(p, props)
            memcpy(p, body_view.buf, lb)
        finally:
            PyBuffer_Release(&body_view)
        _put(out + 4, crc_after_field(self.crc_in_c, self.crc32c, out, length), 4)
        return 0


cdef inline int _grow(bytearray buf, Py_ssize_t end) except -1:
    """``buf`` lengthened to ``end`` bytes, its room at least doubled when it has none
    left: a turn's records are appended one by one to a fresh buffer, which CPython grows
    by an eighth at a time, copying it whole each time (a turn of 64 PREPAREs of 1 KiB
    copied about 0.5 MB; the log's buffer is handed to the flush and not reused). The
    length is what the log counts; only the spare room differs."""
    cdef Py_ssize_t size = PyByteArray_GET_SIZE(buf)
    if end >= (<PyByteArrayObject*>buf).ob_alloc and end < 2 * size:
        # Resized up to twice the size, then down to ``end``: a shrink by less than half
        # keeps the room (bytearray_resize), so the next records need no copy.
        PyByteArray_Resize(buf, 2 * size)
    PyByteArray_Resize(buf, end)
    return 0


cdef inline object _text(const unsigned char* p, Py_ssize_t n):
    return PyUnicode_DecodeUTF8(<const char*>p, n, NULL)


cdef struct _RunBounds:
    Py_ssize_t start  # the first record's position
    Py_ssize_t stop  # no record starts at or after it
    Py_ssize_t count  # records at most
    uint64_t limit  # the largest record
    uint64_t base  # the log offset of position 0


cdef inline bint _run_bounds(object buf, object pos, object base, object max_record_size,
                             object end, object max_records, _RunBounds* run) except -1:
    """A run's arguments in C (``run``), or False when this path does not take them (a
    buffer that is not flat bytes or an mmap, an argument that is not an int or does not fit
    C): the run then stops at ``pos`` and its caller's reference decides there."""
    if not (_flat_bytes(buf) or type(buf) is mmap.mmap):
        return False
    if (type(pos) is not int or type(base) is not int or type(max_record_size) is not int
            or type(end) is not int or type(max_records) is not int):
        return False
    try:
        run.start = pos
        run.stop = end
        run.count = max_records
        run.limit = max_record_size
        # A record's log offset is base + its position, in C: none may pass 2**64.
        run.base = base + max(end, pos)
        run.base = base
    except OverflowError:
        return False
    return run.start >= 0


cdef class DecodeAt:
    """``decode_at(buf, pos, offset, max_record_size, copy_body)`` with the CRC function the
    codec was built with and the reference ``decode_at`` of that codec."""

    cdef object crc32c
    cdef bint crc_in_c
    cdef object reference

    def __init__(self, crc32c, reference):
        self.crc32c = crc32c
        self.reference = reference
        self.crc_in_c = crc_in_c(crc32c)

    def __call__(self, buf, pos, offset, max_record_size, copy_body):
        cdef Py_buffer view
        cdef Py_ssize_t start
        cdef uint64_t limit, at_offset
        if not (_flat_bytes(buf) or type(buf) is mmap.mmap):
            return self.reference(buf, pos, offset, max_record_size, copy_body)
        if type(pos) is not int or type(offset) is not int or type(max_record_size) is not int:
            return self.reference(buf, pos, offset, max_record_size, copy_body)
        try:  # a negative offset or limit is an OverflowError too
            start = pos
            limit = max_record_size
            at_offset = offset
        except OverflowError:
            return self.reference(buf, pos, offset, max_record_size, copy_body)
        if start < 0:
            return self.reference(buf, pos, offset, max_record_size, copy_body)
        try:
            PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        except (BufferError, ValueError, TypeError):  # e.g. a view with gaps, a closed mmap
            return self.reference(buf, pos, offset, max_record_size, copy_body)
        try:
            rec = self._decode(buf, <const unsigned char*>view.buf, view.len, start, offset,
                               at_offset, limit, copy_body, None)
        finally:
            PyBuffer_Release(&view)
        if rec is None:  # a check failed: the reference raises its error
            return self.reference(buf, pos, offset, max_record_size, copy_body)
        return rec

    def run(self, buf, pos, base, max_record_size, copy_body, end, max_records, list out):
        """Append to ``out`` the records ``decode_at`` returns at ``pos`` and after it, one
        after the other, while each starts before ``end``: up to ``max_records``, up to and
        including a FILLER, and stopping before the first position this path does not take
        (a record that fails a check, a buffer or argument it leaves to the reference).
        Returns the position after the last record appended. The caller decodes at that
        position with ``decode_at`` itself (the record, or the error, the reference gives):
        a run may stop early, never differ (``fmq.log.record.runs.decode_run``)."""
        return self._run(buf, pos, base, max_record_size, copy_body, end, max_records, False,
                         out)

    def entry_run(self, buf, pos, base, max_record_size, copy_body, end, max_records,
                  list out):
        """As :meth:`run`, but a plain MESSAGE record (no properties, no tags, no timer:
        most of a log) is appended as the consume-queue entry it creates, without a
        ``Record``: a ``QueueEntry`` of (topic, queue id, queue offset, the record's
        log offset, its size, tag hash 0, store time, key, its log offset), the fields of
        ``fmq.index.derive.queue_entry`` in their order. A run holds entries only or
        records only. Recovery's redo reads the log so
        (``fmq.log.record.runs.decode_entry_run`` is the reference)."""
        return self._run(buf, pos, base, max_record_size, copy_body, end, max_records,
                         True, out)

    def position_run(self, buf, pos, base, max_record_size, end, max_records, list out):
        """Append to ``out`` the position of each record at ``pos`` and after it that passes
        every check of ``check`` (length, CRC, header; the text fields are the caller's),
        one after the other, while each starts before ``end``: up to ``max_records``, up
        to and including a FILLER, stopping before the first position this path does not
        take. Returns the position after the last record appended; the caller checks at
        that position with ``check`` itself (``fmq.log.record.runs.position_run`` is the
        reference). A column-wise reader (the Spark source) reads the fields so, no
        ``Record`` and no Python call per record."""
        cdef Py_buffer view
        cdef _RunBounds run
        cdef Py_ssize_t start, taken
        cdef uint64_t length
        if not _run_bounds(buf, pos, base, max_record_size, end, max_records, &run):
            return pos
        try:
            PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        except (BufferError, ValueError, TypeError):
            return pos
        start = run.start
        taken = 0
        try:
            while start < run.stop and taken < run.count:
                length = self._checked_length(<const unsigned char*>view.buf, view.len,
                                              start, run.base + <uint64_t>start, run.limit)
                if not length:
                    break
                out.append(start)
                taken += 1
                if (<const unsigned char*>view.buf)[start + 11] == _FILLER_CODE:
                    start += <Py_ssize_t>length
                    break
                start += <Py_ssize_t>length
        finally:
            PyBuffer_Release(&view)
        return start

    cdef object _run(self, buf, pos, base, max_record_size, copy_body, end, max_records,
                     bint entries, list out):
        """:meth:`run` (``entries`` false) and :meth:`entry_run` (true)."""
        cdef Py_buffer view
        cdef _RunBounds run
        cdef Py_ssize_t start, taken
        cdef int kind = 0  # what the run holds: 1 entries, 2 records
        cdef uint64_t limit, at_offset
        if not _run_bounds(buf, pos, base, max_record_size, end, max_records, &run):
            return pos
        try:
            PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        except (BufferError, ValueError, TypeError):
            return pos
        start = run.start
        limit = run.limit
        taken = 0
        try:
            whole = None if copy_body else memoryview(buf)
            while start < run.stop and taken < run.count:
                offset = base + start
                at_offset = run.base + <uint64_t>start
                if entries:
                    item = self._entry(<const unsigned char*>view.buf, view.len, start,
                                       offset, at_offset, limit)
                    if item is not None:
                        if kind == 2:
                            break
                        kind = 1
                        out.append(item)
                        taken += 1
                        start += <Py_ssize_t>le(<const unsigned char*>view.buf + start, 4)
                        continue
                    if kind == 1:
                        break
                rec = self._decode(buf, <const unsigned char*>view.buf, view.len, start,
                                   offset, at_offset, limit, copy_body, whole)
                if rec is None:
                    break
                kind = 2
                out.append(rec)
                taken += 1
                start += <Py_ssize_t>rec.size
                if rec.type is _FILLER:
                    break
        finally:
            PyBuffer_Release(&view)
        return start

    cdef uint64_t _checked_length(self, const unsigned char* data, Py_ssize_t size,
                                  Py_ssize_t pos, uint64_t at_offset,
                                  uint64_t limit) except? 0:
        """The length of the record at ``pos`` if its header passes every check
        (``_record_header.checked_length``), else 0: the reference decides."""
        return checked_length(&_FORMAT, data + pos, size - pos, at_offset, limit,
                              self.crc_in_c, self.crc32c)

    cdef object _entry(self, const unsigned char* data, Py_ssize_t size, Py_ssize_t pos,
                       object offset, uint64_t at_offset, uint64_t limit):
        """The queue entry of the plain MESSAGE at ``pos``, or None (another record, or one
        that fails a check: :meth:`_decode` then decides)."""
        cdef const unsigned char* h
        cdef const unsigned char* p
        cdef uint64_t length
        cdef uint32_t topic_len, tx_len, group_len, key_len
        if size - pos < _HEADER:
            return None
        h = data + pos
        if h[11] != _MESSAGE_CODE or le(h + 60, 2) != 0 or le(h + 64, 4) != 0:
            return None  # another type, or tags or properties to decode
        if <int64_t>le(h + 40, 8) >= 0:
            return None  # a timer's delivery: it changes the timers too
        length = self._checked_length(data, size, pos, at_offset, limit)
        if not length:
            return None
        topic_len = <uint32_t>le(h + 52, 2)
        tx_len = <uint32_t>le(h + 54, 2)
        group_len = <uint32_t>le(h + 56, 2)
        key_len = <uint32_t>le(h + 58, 2)
        p = h + _HEADER
        try:
            topic = _text(p, topic_len) if topic_len else ""
            p += topic_len
            if tx_len:  # not in the entry, but a Record would fail on it: so must this
                _text(p, tx_len)
            p += tx_len
            if group_len:
                _text(p, group_len)
            p += group_len
            key = _text(p, key_len) if key_len else None
        except UnicodeDecodeError:
            return None
        return _new_tuple(_QUEUE_ENTRY, (topic, <int32_t>le(h + 28, 4),
                                         <int64_t>le(h + 32, 8), offset, length, 0,
                                         <int64_t>le(h + 20, 8), key, offset))

    cdef object _decode(self, buf, const unsigned char* data, Py_ssize_t size, Py_ssize_t pos,
                        object offset, uint64_t at_offset, uint64_t limit,
                        object copy_body, object whole):
        cdef const unsigned char* h
        cdef const unsigned char* p
        cdef uint64_t length
        cdef uint32_t topic_len, tx_len, group_len, key_len, tags_len, props_len, body_len
        length = self._checked_length(data, size, pos, at_offset, limit)
        if not length:
            return None
        h = data + pos
        rtype = _TYPES[h[11]]
        topic_len = <uint32_t>le(h + 52, 2)
        tx_len = <uint32_t>le(h + 54, 2)
        group_len = <uint32_t>le(h + 56, 2)
        key_len = <uint32_t>le(h + 58, 2)
        tags_len = <uint32_t>le(h + 60, 2)
        props_len = <uint32_t>le(h + 64, 4)
        body_len = <uint32_t>le(h + 68, 4)
        p = h + _HEADER
        try:
            topic = _text(p, topic_len) if topic_len else ""
            p += topic_len
            tx_id = _text(p, tx_len) if tx_len else ""
            p += tx_len
            group = _text(p, group_len) if group_len else ""
            p += group_len
            key = _text(p, key_len) if key_len else None
            p += key_len
            tags = _text(p, tags_len) if tags_len else None
            p += tags_len
        except UnicodeDecodeError:
            return None
        if props_len:
            try:
                properties = decode_properties(
                    PyBytes_FromStringAndSize(<const char*>p, props_len), offset)
            except Exception:  # noqa - the reference raises the same, with its message
                return None
        else:
            properties = None
        p += props_len
        if not body_len:
            body = b""
        elif copy_body:
            body = PyBytes_FromStringAndSize(<const char*>p, body_len)
        else:
            at = pos + (p - h)
            # A run slices one view of the buffer (a view per record costs as much as
            # the rest of the decode); a single decode makes its own.
            body = (memoryview(buf) if whole is None else whole)[at : at + body_len]
        rec = _new_record(Record)
        rec.type = rtype
        rec.log_offset = offset
        rec.store_time = <int64_t>le(h + 20, 8)
        rec.queue_id = <int32_t>le(h + 28, 4)
        rec.queue_offset = <int64_t>le(h + 32, 8)
        rec.ref_offset = <int64_t>le(h + 40, 8)
        rec.ref_size = <uint32_t>le(h + 48, 4)
        rec.topic = topic
        rec.tx_id = tx_id
        rec.producer_group = group
        rec.key = key
        rec.tags = tags
        rec.properties = properties
        rec.body = body
        rec.size = length
        return rec
