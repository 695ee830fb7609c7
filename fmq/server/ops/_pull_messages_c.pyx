# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`fmq.server.ops.pull_messages`: a PULL answer's messages
written in C straight from the log's bytes of the records a pull read (no Record, no
StoredMessage, no properties dict, no bytes per message but the ones the cache keeps; each
body copied once, from the log's bytes into the answer).

Whatever this code does not take as it is it hands, whole, to the reference before
returning anything ("the reference decides"): the reference then raises its error or
returns the answer. So the two always give equal bytes or the same error. Handed over: an
entry that is not a tuple of five ints in their fields' ranges; a record retention deleted
(None) or that is not flat bytes; a kept message that is not (bytes, int); any record the
log codec's checks refuse (length, CRC-32C, magic, version, type, log offset, field
lengths, properties field, text that is not UTF-8); a property name given twice (a dict
keeps its first place and last value); a key or tags of 65,535 bytes (the wire's optional
text holds at most 65,534); a topic that is not text the wire carries.

The wire's ``stored_message`` (docs/protocol.md; big-endian): topic (u16 length, bytes),
queue_id u32, queue_offset u64, offset u64 (the entry's log offset), body (u32 length,
bytes), key and tags (u16 length or 0xFFFF for none, bytes), properties (u16 count, then
each name and value as u16 length and bytes; the dedup window's own left out when the
record has ``%producer`` or ``%principal``, as a pull leaves them out), store_time i64 (the
entry's). The FMQ record is ``fmq.log.record``'s docstring (72-byte little-endian header,
then topic, tx id, group, key, tags, properties, body), its header checked and its
CRC-32C computed by ``fmq/log/record/_record_header.pxd``, as the log codec's twin checks it, its
fields and properties read and checked by ``fmq/log/record/_stored_view.pxd``.
"""

from cpython.buffer cimport PyBUF_FORMAT, PyBUF_ND, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8String
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.string cimport memcpy, strcmp

from fmq.log.record._record_header cimport RecordFormat, crc_in_c, le
from fmq.log.record._stored_view cimport (
    STORED_OK, STORED_PAIR, PropertyPair, PropertyWalk, StoredFields, is_name, read_fields,
    read_pair, stored_format, walk_next, walk_start)

from crc32c import crc32c

from fmq.message import HIDDEN_PROPERTIES, PRINCIPAL_PROPERTY, PRODUCER_ID_PROPERTY

cdef extern from "Python.h":
    long long PyLong_AsLongLong(object v) except? -1
    unsigned long long PyLong_AsUnsignedLongLong(object v) except? -1

cdef bint _CRC_IN_C = crc_in_c(crc32c)
cdef RecordFormat _FORMAT
stored_format(&_FORMAT)

#: A stored_message's fixed bytes: the five lengths (topic 2, body 4, key 2, tags 2,
#: properties' count 2), queue id, queue offset, offset and store time.
cdef Py_ssize_t _FIXED = 2 + 4 + 8 + 8 + 4 + 2 + 2 + 2 + 8
cdef Py_ssize_t _NULL16 = 0xFFFF

cdef list _HIDDEN = sorted(name.encode() for name in HIDDEN_PROPERTIES)
cdef bytes _PRODUCER = PRODUCER_ID_PROPERTY.encode()
cdef bytes _PRINCIPAL = PRINCIPAL_PROPERTY.encode()


class _ReferenceDecides(Exception):
    """Raised inside the C path: the input goes to the reference, whole."""


cdef struct _Message:
    const uint8_t *p  # the record's bytes (NULL: kept, or deleted)
    Py_ssize_t size  # its stored_message's bytes
    uint64_t queue_offset, offset
    int64_t store_time
    Py_ssize_t key_at, key_len, tags_at, tags_len
    Py_ssize_t props_at, props_len
    Py_ssize_t body_at, body_len
    int prop_count  # the properties the answer carries
    bint hide  # the dedup window's own are left out
    bint kept, deleted


cdef inline bint _hidden(const uint8_t *p, Py_ssize_t n) noexcept:
    for name in _HIDDEN:
        if is_name(p, n, <bytes>name):
            return True
    return False


cdef inline void _put_be(uint8_t *at, uint64_t value, int width) noexcept:
    cdef int i
    for i in range(width):
        at[i] = <uint8_t>(value >> (8 * (width - 1 - i)))


cdef int _read_record(_Message *m, const uint8_t *p, Py_ssize_t available,
                      uint64_t max_record_size) except -1:
    """Check the record at ``p`` as the log codec's decode does and read its fields into
    ``m``, with the size of its stored_message past the topic's."""
    cdef StoredFields f
    cdef PropertyWalk w
    cdef Py_ssize_t i
    cdef Py_ssize_t props_wire = 0
    if read_fields(&f, &_FORMAT, _CRC_IN_C, crc32c, p, available, m.offset,
                   max_record_size) != STORED_OK:
        raise _ReferenceDecides()
    if f.key_len >= _NULL16 or f.tags_len >= _NULL16:
        raise _ReferenceDecides()  # the wire's optional text cannot carry it
    m.p = p
    m.key_at, m.key_len, m.tags_at, m.tags_len = f.key_at, f.key_len, f.tags_at, f.tags_len
    m.props_at, m.props_len, m.body_at, m.body_len = f.props_at, f.props_len, f.body_at, f.body_len
    m.prop_count = 0
    m.hide = False
    # decode_properties' checks, then which pairs the answer carries
    walk_start(&w, &f)
    while walk_next(&w, p) == STORED_PAIR:
        if is_name(p + w.pair.name_at, w.pair.name_len, _PRODUCER) or is_name(
                p + w.pair.name_at, w.pair.name_len, _PRINCIPAL):
            m.hide = True
    if w.refused:
        raise _ReferenceDecides()
    for i in range(w.count):
        if m.hide and _hidden(p + w.names[i], w.name_lens[i]):
            continue
        m.prop_count += 1
        props_wire += 4 + w.name_lens[i] + w.text_lens[i]
    m.size = (_FIXED + m.body_len + (m.key_len if m.key_len else 0)
              + (m.tags_len if m.tags_len else 0) + props_wire)
    return 0


cdef inline uint8_t *_put_optional_text(uint8_t *out, const uint8_t *text, Py_ssize_t n
                                        ) noexcept:
    """The wire's optional text (an empty one stored: none, 0xFFFF) at ``out``; past it."""
    if n:
        _put_be(out, <uint64_t>n, 2)
        memcpy(out + 2, text, n)
        return out + 2 + n
    _put_be(out, _NULL16, 2)
    return out + 2


cdef uint8_t *_put_message(uint8_t *out, _Message *m, const uint8_t *topic,
                           Py_ssize_t topic_len, uint64_t queue_id) noexcept:
    """``m``'s stored_message (``_read_record`` measured it) at ``out``; past its end."""
    cdef const uint8_t *p = m.p
    cdef PropertyPair pair
    cdef Py_ssize_t pos, count, i
    _put_be(out, <uint64_t>topic_len, 2)
    memcpy(out + 2, topic, topic_len)
    out += 2 + topic_len
    _put_be(out, queue_id, 4)
    _put_be(out + 4, m.queue_offset, 8)
    _put_be(out + 12, m.offset, 8)
    _put_be(out + 20, <uint64_t>m.body_len, 4)
    out += 24
    memcpy(out, p + m.body_at, m.body_len)
    out += m.body_len
    out = _put_optional_text(out, p + m.key_at, m.key_len)
    out = _put_optional_text(out, p + m.tags_at, m.tags_len)
    _put_be(out, <uint64_t>m.prop_count, 2)
    out += 2
    if m.prop_count:
        pos = m.props_at
        count = <Py_ssize_t>le(p + pos, 2)
        pos += 2
        for i in range(count):
            pos = read_pair(p, pos, &pair)
            if m.hide and _hidden(p + pair.name_at, pair.name_len):
                continue
            _put_be(out, <uint64_t>pair.name_len, 2)
            memcpy(out + 2, p + pair.name_at, pair.name_len)
            out += 2 + pair.name_len
            _put_be(out, <uint64_t>pair.text_len, 2)
            memcpy(out + 2, p + pair.text_at, pair.text_len)
            out += 2 + pair.text_len
    _put_be(out, <uint64_t>m.store_time, 8)
    return out + 8


cdef class PullMessages:
    """``build(topic, queue_id, entries, records, budget, max_record_size, fresh)``, as
    ``reference`` (given here) answers it."""
    cdef object _reference

    def __init__(self, reference):
        self._reference = reference

    def build(self, topic, queue_id, entries, records, budget, max_record_size, fresh):
        """(the messages' bytes, how many, their bodies' bytes, the next queue offset) of
        the stored records (see the reference)."""
        cdef object built = None
        if (type(topic) is str and type(queue_id) is int and 0 <= queue_id <= 0xFFFF_FFFF
                and type(entries) is list and type(records) is list and entries
                and len(entries) == len(records) and type(budget) is int
                and -(1 << 63) <= budget < (1 << 63)
                and type(max_record_size) is int and max_record_size >= 0
                and max_record_size.bit_length() < 64
                and (fresh is None or type(fresh) is list)):
            try:
                built = _build(topic, queue_id, entries, records, budget, max_record_size,
                               fresh)
            except (_ReferenceDecides, OverflowError, BufferError, UnicodeEncodeError):
                built = None
        if built is None:
            return self._reference(topic, queue_id, entries, records, budget,
                                   max_record_size, fresh)
        return built


cdef inline uint64_t _u64(object v) except? 0xFFFFFFFFFFFFFFFF:
    if type(v) is not int:
        raise _ReferenceDecides()
    return PyLong_AsUnsignedLongLong(v)


cdef object _build(str topic, uint64_t queue_id, list entries, list records, int64_t room,
                   uint64_t max_record_size, object fresh):
    cdef Py_ssize_t n = PyList_GET_SIZE(entries), i, held = 0, count = 0, total = 0
    cdef Py_ssize_t topic_len, size
    cdef int64_t body_bytes = 0
    cdef Py_buffer *views
    cdef _Message *msgs
    cdef _Message *m
    cdef object entry, data, form, out, one
    cdef bytes raw_topic = PyUnicode_AsUTF8String(topic)
    cdef const uint8_t *topic_p = <const uint8_t *>PyBytes_AS_STRING(raw_topic)
    cdef uint8_t *start
    cdef uint8_t *at
    cdef uint8_t *end
    cdef Py_ssize_t fits = n  # the first message left out by the budget (n: none)
    topic_len = PyBytes_GET_SIZE(raw_topic)
    if topic_len > 0xFFFF:
        raise _ReferenceDecides()
    views = <Py_buffer *>PyMem_Malloc(n * sizeof(Py_buffer))
    msgs = <_Message *>PyMem_Malloc(n * sizeof(_Message))
    if views == NULL or msgs == NULL:
        PyMem_Free(views)
        PyMem_Free(msgs)
        raise MemoryError()
    try:
        # Every record checked first, as the reference decodes them all before encoding.
        for i in range(n):
            entry = <object>PyList_GET_ITEM(entries, i)
            data = <object>PyList_GET_ITEM(records, i)
            if type(entry) is not tuple or PyTuple_GET_SIZE(entry) != 5:
                raise _ReferenceDecides()
            m = &msgs[i]
            m.kept = m.deleted = False
            m.p = NULL
            m.queue_offset = _u64(<object>PyTuple_GET_ITEM(entry, 0))
            m.offset = _u64(<object>PyTuple_GET_ITEM(entry, 1))
            form = <object>PyTuple_GET_ITEM(entry, 4)
            if type(form) is not int:
                raise _ReferenceDecides()
            m.store_time = PyLong_AsLongLong(form)
            if data is None:
                raise _ReferenceDecides()  # deleted: the reference skips it
            if type(data) is tuple:
                if (PyTuple_GET_SIZE(data) != 2
                        or type(<object>PyTuple_GET_ITEM(data, 0)) is not bytes
                        or type(<object>PyTuple_GET_ITEM(data, 1)) is not int):
                    raise _ReferenceDecides()
                m.kept = True
                m.size = PyBytes_GET_SIZE(<object>PyTuple_GET_ITEM(data, 0))
                m.body_len = PyLong_AsLongLong(<object>PyTuple_GET_ITEM(data, 1))
                continue
            if type(data) is not bytes and type(data) is not memoryview:
                raise _ReferenceDecides()
            PyObject_GetBuffer(data, &views[held], PyBUF_FORMAT | PyBUF_ND)
            held += 1
            # len() of anything but a flat view of bytes is not its bytes
            if views[held - 1].itemsize != 1 or views[held - 1].ndim != 1 or (
                    views[held - 1].format != NULL
                    and strcmp(views[held - 1].format, b"B") != 0):
                raise _ReferenceDecides()
            _read_record(m, <const uint8_t *>views[held - 1].buf, views[held - 1].len,
                         max_record_size)
            m.size += topic_len
        # encode_fitting's rule: the first message whatever its size, then while they fit.
        for i in range(n):
            size = msgs[i].size
            if i and total + size > room:
                fits = i
                break
            total += size
            body_bytes += msgs[i].body_len
            count += 1
        out = PyBytes_FromStringAndSize(NULL, total)
        start = <uint8_t *>PyBytes_AS_STRING(out)
        at = start
        for i in range(count):
            m = &msgs[i]
            if m.kept:
                form = <object>PyTuple_GET_ITEM(<object>PyList_GET_ITEM(records, i), 0)
                memcpy(at, PyBytes_AS_STRING(form), m.size)
                at += m.size
                continue
            end = _put_message(at, m, topic_p, topic_len, queue_id)
            if fresh is not None:
                one = PyBytes_FromStringAndSize(<const char *>at, end - at)
                fresh.append((<object>PyList_GET_ITEM(entries, i), one, m.body_len))
            at = end
        if at != start + total:
            raise SystemError("the PULL answer's size was measured wrong")
        resume = (msgs[fits].queue_offset if fits < n
                  else msgs[count - 1].queue_offset + 1)
        return out, count, body_bytes, resume
    finally:
        for i in range(held):
            PyBuffer_Release(&views[i])
        PyMem_Free(views)
        PyMem_Free(msgs)
