# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`fmq.server.kafka.stored_batches`: a Fetch's record batch
written in C straight from the log's bytes of the records a pull read (no StoredMessage, no
Record, no properties dict per message; each body copied once, from the log's bytes into
the batch).

Whatever this code does not take as it is it hands, whole, to the reference before
returning anything ("the reference decides"): the reference then raises its error or
returns the batch. So the two always give equal bytes or the same error. Handed over: an
entry that is not a tuple of five ints; a record retention deleted (None) or that is not
flat bytes; any record the log codec's checks refuse (length, CRC-32C, magic, version,
type, log offset, field lengths, properties field, text that is not UTF-8); more than 64
properties or a name given twice; a CreateTime property that is not ASCII or has more than
18 digits; a timestamp outside 0..2**62; an offset delta outside 0..2**31; a leader epoch
outside int32.

The mapping (docs/kafka.md; ``mapping.to_record`` is the reference's): the key's bytes (an
empty key: null), the body as the value (empty with ``kafka.null_value``: null), the
timestamp the ``kafka.create_time`` property's digits or else the entry's store time, every
other property a header in the stored order except the dedup window's own (``%producer``,
``%seq``, ``%principal``); a header value is the property's text as UTF-8, NUL alone is
null, NUL and more is decoded by ``mapping.property_to_header`` (a Python call, only for
those).

Layouts: the FMQ record is ``fmq.log.record``'s docstring (72-byte little-endian header,
then topic, tx id, group, key, tags, properties, body), its header checked and its CRC-32C
computed by ``fmq/log/record/_record_header.pxd``, as the log codec's twin checks it, its
fields and properties read and checked by ``fmq/log/record/_stored_view.pxd``; the Kafka
batch is records.py's.
"""

from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, strcmp

from fmq.log.record._record_header cimport RecordFormat, crc_in_c, fmq_crc32c_sse42, le
from fmq.log.record._stored_view cimport (
    STORED_OK, STORED_PAIR, PropertyPair, PropertyWalk, StoredFields, is_ascii, is_name, read_fields,
    read_pair, stored_format, walk_next, walk_start)

from crc32c import crc32c

from fmq.message import HIDDEN_PROPERTIES
from fmq.server.kafka.mapping import CREATE_TIME_PROPERTY, NULL_VALUE_PROPERTY, property_to_header

cdef extern from "Python.h":
    long long PyLong_AsLongLong(object v) except? -1

cdef bint _CRC_IN_C = crc_in_c(crc32c)
cdef RecordFormat _FORMAT
stored_format(&_FORMAT)

cdef Py_ssize_t _KAFKA_HEAD = 21  # base offset .. CRC
cdef Py_ssize_t _KAFKA_OVERHEAD = 61  # the head and the body's fixed fields
cdef Py_ssize_t _LENGTH_FROM = 12
cdef int64_t _TIME_LIMIT = 1LL << 62

cdef bytes _CREATE_TIME = CREATE_TIME_PROPERTY.encode()
cdef bytes _NULL_VALUE = NULL_VALUE_PROPERTY.encode()
cdef list _HIDDEN = sorted(name.encode() for name in HIDDEN_PROPERTIES)
cdef object _property_to_header = property_to_header

# What a property becomes in the record.
cdef enum:
    _SKIPPED = 0  # hidden, the CreateTime taken as the timestamp, the null value's mark
    _HEADER_TEXT = 1  # a header, its value the text's bytes
    _HEADER_NULL = 2  # a header with a null value (the text NUL alone)
    _HEADER_ESCAPED = 3  # a header, its value property_to_header's


class _ReferenceDecides(Exception):
    """Raised inside the C path: the input goes to the reference, whole."""


cdef struct _Record:
    const uint8_t *p  # the record's bytes
    int64_t delta  # its queue offset minus the batch's base offset
    int64_t timestamp
    Py_ssize_t key_at, key_len  # key_len 0: a null key
    Py_ssize_t props_at, props_len
    Py_ssize_t body_at, body_len
    bint null_value
    int header_count
    Py_ssize_t headers_size  # the headers field's bytes, its count included
    Py_ssize_t size  # the Kafka record's bytes after its length varint


cdef inline int _varint_size(int64_t value) noexcept:
    cdef uint64_t z = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef int n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n


cdef inline uint8_t *_put_varint(uint8_t *out, int64_t value) noexcept:
    cdef uint64_t z = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    while z >= 0x80:
        out[0] = <uint8_t>((z & 0x7F) | 0x80)
        out += 1
        z >>= 7
    out[0] = <uint8_t>z
    return out + 1


cdef inline uint8_t *_put_field(uint8_t *out, const uint8_t *data, Py_ssize_t n) noexcept:
    out = _put_varint(out, n)
    memcpy(out, data, n)
    return out + n


cdef inline void _put_be(uint8_t *at, uint64_t value, int width) noexcept:
    cdef int i
    for i in range(width):
        at[i] = <uint8_t>(value >> (8 * (width - 1 - i)))


cdef inline bint _digits(const uint8_t *p, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] < 48 or p[i] > 57:
            return False
    return True


cdef int _kind(const uint8_t *name, Py_ssize_t name_len, const uint8_t *text,
               Py_ssize_t text_len, Py_ssize_t body_len, int64_t *create_time) except -1:
    """What property ``name`` = ``text`` becomes (``mapping.to_record``'s rule);
    ``create_time`` gets the CreateTime it carries (-1: none)."""
    cdef Py_ssize_t i
    cdef int64_t value = 0
    for hidden in _HIDDEN:
        if is_name(name, name_len, <bytes>hidden):
            return _SKIPPED
    if is_name(name, name_len, _CREATE_TIME):
        if not is_ascii(text, text_len):
            raise _ReferenceDecides()  # str.isdigit takes other digits: the reference's
        if text_len > 0 and _digits(text, text_len):
            if text_len > 18:
                raise _ReferenceDecides()
            for i in range(text_len):
                value = value * 10 + (text[i] - 48)
            create_time[0] = value
            return _SKIPPED
    if is_name(name, name_len, _NULL_VALUE) and body_len == 0:
        return _SKIPPED
    if text_len == 0 or text[0] != 0:
        return _HEADER_TEXT
    if text_len == 1:
        return _HEADER_NULL
    return _HEADER_ESCAPED


cdef object _escaped(const uint8_t *text, Py_ssize_t text_len):
    """A header value stored escaped (NUL then base64), as the reference decodes it."""
    value = _property_to_header(PyUnicode_DecodeUTF8(<const char *>text, text_len, NULL))
    if type(value) is not bytes:
        raise _ReferenceDecides()
    return value


cdef int _read_record(_Record *r, const uint8_t *p, Py_ssize_t available, uint64_t log_offset,
                      uint64_t max_record_size, list escaped) except -1:
    """Check the record at ``p`` as the log codec's decode does and read its fields into
    ``r`` (the headers' values that need Python onto ``escaped``, in order)."""
    cdef StoredFields f
    cdef PropertyWalk w
    cdef Py_ssize_t n, name_at, name_len, text_at, text_len
    cdef int kind
    cdef int64_t create_time = -1
    if read_fields(&f, &_FORMAT, _CRC_IN_C, crc32c, p, available, log_offset,
                   max_record_size) != STORED_OK:
        raise _ReferenceDecides()
    r.p = p
    r.key_at, r.key_len = f.key_at, f.key_len
    r.props_at, r.props_len, r.body_at, r.body_len = f.props_at, f.props_len, f.body_at, f.body_len
    r.null_value = False
    r.header_count = 0
    r.headers_size = 0
    # decode_properties' checks; then each pair's fate in the record
    walk_start(&w, &f)
    while walk_next(&w, p) == STORED_PAIR:
        name_at, name_len = w.pair.name_at, w.pair.name_len
        text_at, text_len = w.pair.text_at, w.pair.text_len
        kind = _kind(p + name_at, name_len, p + text_at, text_len, r.body_len, &create_time)
        if kind == _SKIPPED:
            if is_name(p + name_at, name_len, _NULL_VALUE) and r.body_len == 0:
                r.null_value = True
            continue
        r.header_count += 1
        r.headers_size += _varint_size(name_len) + name_len
        if kind == _HEADER_TEXT:
            r.headers_size += _varint_size(text_len) + text_len
        elif kind == _HEADER_NULL:
            r.headers_size += 1
        else:
            value = _escaped(p + text_at, text_len)
            escaped.append(value)
            n = PyBytes_GET_SIZE(value)
            r.headers_size += _varint_size(n) + n
    if w.refused:
        raise _ReferenceDecides()
    r.headers_size += _varint_size(r.header_count)
    if create_time >= 0:
        r.timestamp = create_time
    if r.timestamp < 0 or r.timestamp >= _TIME_LIMIT:
        raise _ReferenceDecides()
    return 0


cdef uint8_t *_put_headers(uint8_t *out, _Record *r, list escaped, Py_ssize_t *next_escaped
                           ) except NULL:
    """The record's headers field (``_read_record`` measured it)."""
    cdef const uint8_t *p = r.p
    cdef PropertyPair pair
    cdef Py_ssize_t pos, count, i, name_at, name_len, text_at, text_len
    cdef int64_t ignored = -1
    cdef int kind
    out = _put_varint(out, r.header_count)
    if not r.header_count:
        return out
    pos = r.props_at
    count = <Py_ssize_t>le(p + pos, 2)
    pos += 2
    for i in range(count):
        pos = read_pair(p, pos, &pair)
        name_at, name_len, text_at, text_len = (pair.name_at, pair.name_len, pair.text_at,
                                                pair.text_len)
        kind = _kind(p + name_at, name_len, p + text_at, text_len, r.body_len, &ignored)
        if kind == _SKIPPED:
            continue
        out = _put_field(out, p + name_at, name_len)
        if kind == _HEADER_TEXT:
            out = _put_field(out, p + text_at, text_len)
        elif kind == _HEADER_NULL:
            out = _put_varint(out, -1)
        else:
            value = escaped[next_escaped[0]]
            next_escaped[0] += 1
            out = _put_field(out, <const uint8_t *>PyBytes_AS_STRING(value),
                             PyBytes_GET_SIZE(value))
    return out


cdef inline int64_t _int64(object v) except? -1:
    if type(v) is not int:
        raise _ReferenceDecides()
    return PyLong_AsLongLong(v)


cdef class StoredBatches:
    """``encode(topic, queue_id, entries, records, leader_epoch, max_record_size)``, as
    ``reference`` (given here) answers it."""
    cdef object _reference

    def __init__(self, reference):
        self._reference = reference

    def encode(self, topic, queue_id, entries, records, leader_epoch, max_record_size):
        """(the record batch, messages, body bytes) of the stored records (see the
        reference)."""
        cdef object batch = None
        if (type(entries) is list and type(records) is list and entries
                and len(entries) == len(records) and type(leader_epoch) is int
                and -(1 << 31) <= leader_epoch < (1 << 31) and type(max_record_size) is int
                and max_record_size >= 0 and max_record_size.bit_length() < 64):
            try:
                batch = _encode(entries, records, leader_epoch, max_record_size)
            except (_ReferenceDecides, OverflowError):
                batch = None
        if batch is None:
            return self._reference(topic, queue_id, entries, records, leader_epoch,
                                   max_record_size)
        return batch


cdef object _encode(list entries, list records, int32_t leader_epoch, uint64_t max_record_size):
    cdef Py_ssize_t n = len(entries), i, held = 0, total, next_escaped = 0
    cdef Py_buffer *views = <Py_buffer *>PyMem_Malloc(n * sizeof(Py_buffer))
    cdef _Record *recs = <_Record *>PyMem_Malloc(n * sizeof(_Record))
    cdef _Record *r
    cdef list escaped = []
    cdef int64_t base_offset = 0, base_ts, max_ts, body_bytes = 0, log_offset
    cdef uint8_t *out
    cdef uint8_t *start
    cdef object entry, data, batch
    if views == NULL or recs == NULL:
        PyMem_Free(views)
        PyMem_Free(recs)
        raise MemoryError()
    try:
        for i in range(n):
            entry = entries[i]
            data = records[i]
            if type(entry) is not tuple or PyTuple_GET_SIZE(entry) != 5:
                raise _ReferenceDecides()
            if type(data) is not bytes and type(data) is not memoryview:
                raise _ReferenceDecides()  # None (deleted) among them
            PyObject_GetBuffer(data, &views[i], PyBUF_FORMAT | PyBUF_ND)
            held += 1
            # len() of anything but a flat view of bytes is not its bytes
            if views[i].itemsize != 1 or views[i].ndim != 1 or (
                    views[i].format != NULL and strcmp(views[i].format, b"B") != 0):
                raise _ReferenceDecides()
            r = &recs[i]
            if i == 0:
                base_offset = _int64(<object>PyTuple_GET_ITEM(entry, 0))
            r.delta = _int64(<object>PyTuple_GET_ITEM(entry, 0)) - base_offset
            if r.delta < 0 or r.delta >= (1LL << 31):
                raise _ReferenceDecides()
            r.timestamp = _int64(<object>PyTuple_GET_ITEM(entry, 4))  # the store time
            log_offset = _int64(<object>PyTuple_GET_ITEM(entry, 1))
            if log_offset < 0:
                raise _ReferenceDecides()
            _read_record(r, <const uint8_t *>views[i].buf, views[i].len,
                         <uint64_t>log_offset, max_record_size, escaped)
            body_bytes += r.body_len
        base_ts = max_ts = recs[0].timestamp
        for i in range(n):
            if recs[i].timestamp < base_ts:
                base_ts = recs[i].timestamp
            if recs[i].timestamp > max_ts:
                max_ts = recs[i].timestamp
        total = _KAFKA_OVERHEAD
        for i in range(n):
            r = &recs[i]
            r.size = (1 + _varint_size(r.timestamp - base_ts) + _varint_size(r.delta)
                      + (_varint_size(r.key_len) + r.key_len if r.key_len else 1)
                      + (1 if r.null_value else _varint_size(r.body_len) + r.body_len)
                      + r.headers_size)
            total += _varint_size(r.size) + r.size
        batch = PyBytes_FromStringAndSize(NULL, total)
        start = <uint8_t *>PyBytes_AS_STRING(batch)
        out = start + _KAFKA_OVERHEAD
        for i in range(n):
            r = &recs[i]
            out = _put_varint(out, r.size)
            out[0] = 0  # attributes
            out = _put_varint(out + 1, r.timestamp - base_ts)
            out = _put_varint(out, r.delta)
            if r.key_len:
                out = _put_field(out, r.p + r.key_at, r.key_len)
            else:
                out = _put_varint(out, -1)
            if r.null_value:
                out = _put_varint(out, -1)
            else:
                out = _put_field(out, r.p + r.body_at, r.body_len)
            out = _put_headers(out, r, escaped, &next_escaped)
        if out != start + total:
            raise SystemError("the Fetch batch's size was measured wrong")
        _put_be(start, <uint64_t>base_offset, 8)
        _put_be(start + 8, <uint64_t>(total - _LENGTH_FROM), 4)
        _put_be(start + 12, <uint64_t><uint32_t>leader_epoch, 4)
        start[16] = 2  # magic
        _put_be(start + 21, 0, 2)  # attributes
        _put_be(start + 23, <uint64_t>recs[n - 1].delta, 4)
        _put_be(start + 27, <uint64_t>base_ts, 8)
        _put_be(start + 35, <uint64_t>max_ts, 8)
        _put_be(start + 43, <uint64_t>-1, 8)  # producer id
        _put_be(start + 51, <uint64_t>-1, 2)  # producer epoch
        _put_be(start + 53, <uint64_t>-1, 4)  # base sequence
        _put_be(start + 57, <uint64_t>n, 4)
        if _CRC_IN_C:
            _put_be(start + 17, fmq_crc32c_sse42(start + _KAFKA_HEAD,
                                                       total - _KAFKA_HEAD), 4)
        else:
            _put_be(start + 17, <uint32_t>crc32c(memoryview(batch)[_KAFKA_HEAD:]), 4)
        return batch, n, body_bytes
    finally:
        for i in range(held):
            PyBuffer_Release(&views[i])
        PyMem_Free(views)
        PyMem_Free(recs)
