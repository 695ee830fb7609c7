# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`fmq.server.kafka.record_messages`: a Produce's record batches
read in C straight into :class:`fmq.message.Message` objects (no record object per
record, the CreateTime property's text made once per millisecond), and a Fetch's record
batch written in C from the stored messages (no record object per message).

Whatever this code does not take as it is it hands, whole, to the reference before
returning anything: the reference then raises its error, or returns the value. So the two
always give equal messages and bytes or the same error; what goes to the reference is
named where it is decided ("the reference decides"). Produce: anything that is an error
there (a batch's length, magic or CRC-32C, a record's lengths and varints, a key that is
not UTF-8, a header without a name or with a name given twice or one of the door's own),
besides a control batch, a varint of 10 bytes (the reference's arithmetic is unbounded),
a header name starting with ``%`` and a base timestamp beyond +-2**62. Fetch: a timestamp
outside 0..2**62 (stored time, or a CreateTime text that is not 1-18 ASCII digits), an
offset delta outside 0..2**31, text that does not encode to UTF-8, a body that is not
bytes, and anything that is not a StoredMessage's plain fields.

Layout (records.py says it in full): a batch's head is base offset i64, length i32,
partition leader epoch i32, magic i8, CRC-32C u32; after it attributes i16, last offset
delta i32, base and max timestamps i64, producer id i64, producer epoch i16, base sequence
i32, record count i32, then the records, every length and delta a zig-zag varint.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Next
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport PyObject
from cpython.unicode cimport (
    PyUnicode_CheckExact,
    PyUnicode_DecodeUTF8,
    PyUnicode_GET_LENGTH,
    PyUnicode_READ_CHAR,
)
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr, memcpy

from crc32c import crc32c

from fmq.message import (
    HIDDEN_PROPERTIES,
    MAX_NAME,
    MAX_PROPERTIES,
    PRODUCER_ID_PROPERTY,
    SEQUENCE_PROPERTY,
    Message,
    StoredMessage,
)
from fmq.server.kafka.compression import NONE, decompress
from fmq.server.kafka.mapping import (
    CREATE_TIME_PROPERTY,
    ESCAPE,
    KAFKA_PROPERTIES,
    NULL_VALUE_PROPERTY,
    header_to_property,
    property_to_header,
)

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size) except NULL
    bint PyUnicode_IS_ASCII(object text)

cdef Py_ssize_t _HEAD = 21  # base offset .. CRC
cdef Py_ssize_t _OVERHEAD = 61  # the head and the body's fixed fields
cdef Py_ssize_t _LENGTH_FROM = 12
cdef int _COMPRESSION_MASK = 0x07
cdef int _CONTROL = 0x20
cdef int64_t _TIME_LIMIT = 1LL << 62
cdef object _EMPTY = b""
cdef object _NULL_TEXT = "1"  # the null value's property
cdef object _CREATE_TIME = CREATE_TIME_PROPERTY
cdef object _NULL_VALUE = NULL_VALUE_PROPERTY
cdef object _KAFKA_PROPERTIES = KAFKA_PROPERTIES
cdef object _HIDDEN = HIDDEN_PROPERTIES
cdef object _PRODUCER = PRODUCER_ID_PROPERTY
cdef object _SEQUENCE = SEQUENCE_PROPERTY
cdef object _ESCAPE = ESCAPE
cdef object _MESSAGE = Message
cdef object _new_object = object.__new__
cdef Py_ssize_t _MAX_NAME = MAX_NAME
cdef Py_ssize_t _MAX_PROPERTIES = MAX_PROPERTIES


cdef inline object _new_message(object topic, object body, object key, dict properties,
                                object queue_id):
    """``fmq.message.new_message(topic, body, key, None, properties, queue_id)``, its two
    steps made here (the Python call per message cost more than the rest of them)."""
    message = _new_object(_MESSAGE)
    message.__dict__ = {"topic": topic, "body": body, "key": key, "tags": None,
                        "properties": properties, "queue_id": queue_id}
    return message


class _ReferenceDecides(Exception):
    """Raised inside the C path: the input goes to the reference, whole."""


cdef inline int64_t _i64(const uint8_t *q):
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | q[i]
    return <int64_t>v


cdef inline int32_t _i32(const uint8_t *q):
    return <int32_t>((<uint32_t>q[0] << 24) | (<uint32_t>q[1] << 16) | (<uint32_t>q[2] << 8)
                     | <uint32_t>q[3])


cdef inline int16_t _i16(const uint8_t *q):
    return <int16_t>((q[0] << 8) | q[1])


cdef inline bint _varint(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos, int64_t *out):
    """The zig-zag varint at ``pos`` (before ``end``): False when it runs past ``end`` or is
    longer than 9 bytes (the reference decides those)."""
    cdef uint64_t raw = 0
    cdef int shift = 0
    cdef uint8_t b
    cdef Py_ssize_t i = pos[0]
    while True:
        if i >= end or shift > 56:
            return False
        b = p[i]
        i += 1
        raw |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            break
        shift += 7
    pos[0] = i
    out[0] = (<int64_t>(raw >> 1)) ^ -(<int64_t>(raw & 1))
    return True


# ================================================================ Produce


cdef struct _Plain:
    bint plain  # every message so far passes check_message's rules of its own fields
    Py_ssize_t largest  # the index of the first message with the largest body
    Py_ssize_t largest_size


cdef class RecordMessages:
    """``decode(data, max_size, topic, partition)`` and ``decode_plain(...)``, as
    ``reference`` and ``plain_reference`` (given here) answer them."""
    cdef object _reference
    cdef object _plain_reference

    def __init__(self, reference, plain_reference=None):
        self._reference = reference
        self._plain_reference = plain_reference

    def decode(self, data, max_size, topic, partition):
        """The messages of a partition's ``records`` (see the reference)."""
        cdef _Plain plain
        cdef list messages = self._decode(data, max_size, topic, partition, &plain)
        if messages is None:
            return self._reference(data, max_size, topic, partition)
        return messages

    def decode_plain(self, data, max_size, topic, partition):
        """(the messages, the index of the first with the largest body when each is plain,
        else -1): see the plain reference."""
        cdef _Plain plain
        cdef list messages = self._decode(data, max_size, topic, partition, &plain)
        if messages is None:
            return self._plain_reference(data, max_size, topic, partition)
        return messages, (plain.largest if plain.plain else -1)

    cdef list _decode(self, object data, object max_size, object topic, object partition,
                      _Plain *plain):
        """The messages, or None when the reference decides."""
        cdef Py_buffer view
        cdef list messages
        if data is None or type(data) is not bytes:
            return None
        plain.plain = True
        plain.largest = -1
        plain.largest_size = -1
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            messages = _batches(data, <const uint8_t *>view.buf, view.len, max_size, topic,
                                partition, plain)
        except _ReferenceDecides:
            messages = None
        finally:
            PyBuffer_Release(&view)
        return messages


cdef list _batches(object data, const uint8_t *p, Py_ssize_t size, object max_size,
                   object topic, object partition, _Plain *plain):
    cdef list out = []
    cdef Py_ssize_t pos = 0, end
    cdef int32_t length, count
    cdef int attributes
    cdef int64_t base_ts, producer_id
    cdef int16_t producer_epoch
    cdef int32_t base_sequence
    cdef object records, producer
    cdef Py_buffer view
    while pos < size:
        if size - pos < _OVERHEAD or p[pos + 16] != 2:
            raise _ReferenceDecides()
        length = _i32(p + pos + 8)
        end = pos + _LENGTH_FROM + length
        if length < _OVERHEAD - _LENGTH_FROM or end > size:
            raise _ReferenceDecides()
        if crc32c(memoryview(data)[pos + _HEAD:end]) != <uint32_t>_i32(p + pos + 17):
            raise _ReferenceDecides()
        attributes = _i16(p + pos + 21)
        base_ts = _i64(p + pos + 27)
        producer_id = _i64(p + pos + 43)
        producer_epoch = _i16(p + pos + 51)
        base_sequence = _i32(p + pos + 53)
        count = _i32(p + pos + 57)
        if attributes & _CONTROL or base_ts > _TIME_LIMIT or base_ts < -_TIME_LIMIT:
            raise _ReferenceDecides()
        producer = None
        if producer_id >= 0 and base_sequence >= 0:
            producer = f"kafka-{producer_id}-{producer_epoch}-{partition}"
        if attributes & _COMPRESSION_MASK == NONE:
            if count < 0 or count > end - pos - _OVERHEAD:
                raise _ReferenceDecides()
            _records(p + pos + _OVERHEAD, end - pos - _OVERHEAD, count, base_ts, topic,
                     partition, producer, base_sequence, out, plain)
        else:
            try:
                records = decompress(attributes & _COMPRESSION_MASK,
                                     data[pos + _OVERHEAD:end], max_size)
            except Exception:
                raise _ReferenceDecides()
            if type(records) is not bytes or count < 0 or count > len(records):
                raise _ReferenceDecides()
            PyObject_GetBuffer(records, &view, PyBUF_SIMPLE)
            try:
                _records(<const uint8_t *>view.buf, view.len, count, base_ts, topic,
                         partition, producer, base_sequence, out, plain)
            finally:
                PyBuffer_Release(&view)
        pos = end
    return out


cdef object _field(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos):
    """A record's key or value: its bytes, or None (a negative length)."""
    cdef int64_t n
    if not _varint(p, end, pos, &n):
        raise _ReferenceDecides()
    if n < 0:
        return None
    if n > end - pos[0]:
        raise _ReferenceDecides()
    value = PyBytes_FromStringAndSize(<const char *>(p + pos[0]), n)
    pos[0] += n
    return value


cdef void _records(const uint8_t *p, Py_ssize_t size, int32_t count, int64_t base_ts,
                   object topic, object partition, object producer, int32_t base_sequence,
                   list out, _Plain *plain) except *:
    """``count`` records of ``p`` (all ``size`` bytes of them), made messages onto ``out``;
    ``plain`` follows them (see :func:`_plain_properties`)."""
    cdef Py_ssize_t pos = 0, end
    cdef int64_t length, ts_delta, ignored, timestamp, header_count, last_time = -1
    cdef int32_t i
    cdef object key, value, text, last_text = None
    cdef dict properties
    for i in range(count):
        if not _varint(p, size, &pos, &length):
            raise _ReferenceDecides()
        if length < 1 or length > size - pos:
            raise _ReferenceDecides()
        end = pos + length
        pos += 1  # the attributes (unused in v2)
        if not (_varint(p, end, &pos, &ts_delta) and _varint(p, end, &pos, &ignored)):
            raise _ReferenceDecides()
        key = _field(p, end, &pos)
        value = _field(p, end, &pos)
        if not _varint(p, end, &pos, &header_count):
            raise _ReferenceDecides()
        properties = {}
        if header_count != 0:
            _headers(p, end, &pos, header_count, properties)
        if pos != end:
            raise _ReferenceDecides()
        if plain.plain and key is not None and not _plain_key(key):
            plain.plain = False
        if key is not None:
            if len(key):
                try:
                    key = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key),
                                               NULL)
                except UnicodeDecodeError:
                    raise _ReferenceDecides()
            else:
                key = None
        if value is None:
            properties[_NULL_VALUE] = _NULL_TEXT
            value = _EMPTY
        timestamp = base_ts + ts_delta
        if timestamp >= 0:
            if timestamp != last_time:
                last_time, last_text = timestamp, str(timestamp)
            properties[_CREATE_TIME] = last_text
        if producer is not None:
            properties[_PRODUCER] = producer
            properties[_SEQUENCE] = str(<int64_t>base_sequence + i)
        if plain.plain:
            if properties and not _plain_properties(properties):
                plain.plain = False
            elif PyBytes_GET_SIZE(value) > plain.largest_size:
                plain.largest = len(out)
                plain.largest_size = PyBytes_GET_SIZE(value)
        out.append(_new_message(topic, value, key, properties or None, partition))
    if pos != size:
        raise _ReferenceDecides()


cdef inline bint _plain_key(bytes key):
    """Whether a record's key (its bytes, UTF-8) passes ``check_label``: none (empty), or
    1-255 bytes without NUL."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(key)
    return n <= _MAX_NAME and memchr(PyBytes_AS_STRING(key), 0, n) == NULL


cdef bint _plain_properties(dict properties):
    """``fmq.message.plain_properties``: every name and value an ASCII ``str``, no name
    starting with ``%``, within ``MAX_PROPERTIES`` encoded."""
    cdef Py_ssize_t pos = 0, size = 2
    cdef PyObject *name
    cdef PyObject *text
    while PyDict_Next(properties, &pos, &name, &text):
        if not (PyUnicode_CheckExact(<object>name) and PyUnicode_CheckExact(<object>text)
                and PyUnicode_IS_ASCII(<object>name) and PyUnicode_IS_ASCII(<object>text)):
            return False
        if (PyUnicode_GET_LENGTH(<object>name) > 0
                and PyUnicode_READ_CHAR(<object>name, 0) == 37):  # "%"
            return False
        size += 4 + PyUnicode_GET_LENGTH(<object>name) + PyUnicode_GET_LENGTH(<object>text)
    return size <= _MAX_PROPERTIES


cdef void _headers(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos, int64_t count,
                   dict properties) except *:
    """A record's headers, as properties (mapping.py's rule)."""
    cdef int64_t i
    cdef object name, value
    if count < 0 or count > end - pos[0]:
        raise _ReferenceDecides()
    for i in range(count):
        name = _field(p, end, pos)
        value = _field(p, end, pos)
        if name is None:
            raise _ReferenceDecides()
        try:
            name = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name),
                                        NULL)
        except UnicodeDecodeError:
            raise _ReferenceDecides()
        # The door's own names and a name twice are refused; a "%" name could be one the
        # numbering sets after the headers.
        if name in _KAFKA_PROPERTIES or name in properties or name[:1] == "%":
            raise _ReferenceDecides()
        properties[name] = header_to_property(value)


# ================================================================ Fetch


cdef struct _Out:
    char *data
    Py_ssize_t size
    Py_ssize_t capacity


cdef int _reserve(_Out *out, Py_ssize_t n) except -1:
    cdef Py_ssize_t capacity
    cdef char *grown
    if out.size + n <= out.capacity:
        return 0
    capacity = max(out.capacity * 2, out.size + n)
    grown = <char *>PyMem_Realloc(out.data, capacity)
    if grown == NULL:
        raise MemoryError()
    out.data = grown
    out.capacity = capacity
    return 0


cdef inline int _varint_size(int64_t value):
    cdef uint64_t z = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    cdef int n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n


cdef inline void _put_varint(_Out *out, int64_t value):
    """(room reserved by the caller: 10 bytes at most)"""
    cdef uint64_t z = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    while z >= 0x80:
        out.data[out.size] = <char>((z & 0x7F) | 0x80)
        out.size += 1
        z >>= 7
    out.data[out.size] = <char>z
    out.size += 1


cdef int _put_bytes(_Out *out, const char *data, Py_ssize_t n) except -1:
    _reserve(out, n + 10)
    _put_varint(out, n)
    memcpy(out.data + out.size, data, n)
    out.size += n
    return 0


cdef inline void _put_be(char *at, uint64_t value, int width):
    cdef int i
    for i in range(width):
        at[i] = <char>(value >> (8 * (width - 1 - i)))


cdef int64_t _digits(object text) except -2:
    """The value of 1-18 ASCII digits; -1 for other ASCII text (a header, as the reference
    has it). Other text: the reference decides."""
    cdef Py_ssize_t n, i
    cdef const char *s
    cdef int64_t value = 0
    if not text.isascii():
        raise _ReferenceDecides()
    s = PyUnicode_AsUTF8AndSize(text, &n)
    if n == 0:
        return -1
    for i in range(n):
        if s[i] < 48 or s[i] > 57:
            return -1
        if i < 18:
            value = value * 10 + (s[i] - 48)
    if n > 18:
        raise _ReferenceDecides()
    return value


cdef class _Prepared:
    """A message's record fields (the headers only when it has any)."""
    cdef int64_t timestamp
    cdef int64_t delta
    cdef object value  # bytes, or None for a null value
    cdef object key  # str or None
    cdef list headers  # [(name str, value bytes or None)], or None


cdef _Prepared _prepare(object message, int64_t base_offset):
    cdef _Prepared r = _Prepared.__new__(_Prepared)
    cdef object props, body, stored, queue_offset
    cdef int64_t timestamp, offset, number
    if type(message) is not StoredMessage:
        raise _ReferenceDecides()
    d = message.__dict__
    body = d["body"]
    stored = d["store_time"]
    queue_offset = d["queue_offset"]
    props = d["properties"]
    if (type(body) is not bytes or type(stored) is not int or type(queue_offset) is not int
            or (props is not None and type(props) is not dict)):
        raise _ReferenceDecides()
    offset = queue_offset
    r.delta = offset - base_offset
    if r.delta < 0 or r.delta >= (1LL << 31):
        raise _ReferenceDecides()
    timestamp = stored
    r.value = body
    r.headers = None
    if props:
        for name, text in props.items():
            if type(name) is not str or type(text) is not str:
                raise _ReferenceDecides()
            if name in _HIDDEN:
                continue
            if name == _CREATE_TIME:
                number = _digits(text)
                if number >= 0:
                    timestamp = number
                    continue
            if name == _NULL_VALUE and not len(body):
                r.value = None
                continue
            if r.headers is None:
                r.headers = []
            if text[:1] == _ESCAPE:
                header = property_to_header(text)
            else:
                header = text.encode("utf-8")
            r.headers.append((name, header))
    if timestamp < 0 or timestamp >= _TIME_LIMIT:
        raise _ReferenceDecides()
    r.timestamp = timestamp
    key = d["key"]
    if key is not None and type(key) is not str:
        raise _ReferenceDecides()
    r.key = key if key else None
    return r


cdef class MessageBatch:
    """``encode(messages, leader_epoch)``, as ``reference`` (given here) answers it."""
    cdef object _reference

    def __init__(self, reference):
        self._reference = reference

    def encode(self, messages, leader_epoch=0):
        """One record batch of ``messages`` (see the reference)."""
        cdef object batch
        if (type(messages) is not list or not messages or type(leader_epoch) is not int
                or not -(1 << 31) <= leader_epoch < (1 << 31)):
            return self._reference(messages, leader_epoch)
        try:
            batch = _encode(messages, leader_epoch)
        except (_ReferenceDecides, UnicodeEncodeError, OverflowError):
            batch = None
        if batch is None:
            return self._reference(messages, leader_epoch)
        return batch


cdef object _encode(list messages, int32_t leader_epoch):
    cdef list prepared = []
    cdef _Prepared r
    cdef int64_t base_offset, base_ts, max_ts, delta
    cdef Py_ssize_t n, key_size, value_size, record_size, start, crc_at
    cdef const char *key_data
    cdef _Out out
    first = messages[0]
    if type(first) is not StoredMessage or type(first.queue_offset) is not int:
        raise _ReferenceDecides()
    base_offset = first.queue_offset
    for message in messages:
        prepared.append(_prepare(message, base_offset))
    base_ts = max_ts = (<_Prepared>prepared[0]).timestamp
    for r in prepared:
        if r.timestamp < base_ts:
            base_ts = r.timestamp
        if r.timestamp > max_ts:
            max_ts = r.timestamp
    out.data = NULL
    out.size = out.capacity = 0
    try:
        _reserve(&out, _OVERHEAD + 64 * len(prepared))
        out.size = _OVERHEAD
        for r in prepared:
            key_data = NULL
            key_size = 0
            if r.key is not None:
                key_data = PyUnicode_AsUTF8AndSize(r.key, &key_size)
            value_size = len(r.value) if r.value is not None else 0
            record_size = (1 + _varint_size(r.timestamp - base_ts) + _varint_size(r.delta)
                           + (_varint_size(key_size) + key_size if key_data != NULL else 1)
                           + (_varint_size(value_size) + value_size
                              if r.value is not None else 1))
            headers = _header_bytes(r.headers)
            record_size += len(headers)
            _reserve(&out, 10 + record_size)
            start = out.size
            _put_varint(&out, record_size)
            out.data[out.size] = 0  # attributes
            out.size += 1
            _put_varint(&out, r.timestamp - base_ts)
            _put_varint(&out, r.delta)
            if key_data != NULL:
                _put_bytes(&out, key_data, key_size)
            else:
                _put_varint(&out, -1)
            if r.value is not None:
                _put_bytes(&out, PyBytes_AS_STRING(r.value), value_size)
            else:
                _put_varint(&out, -1)
            memcpy(out.data + out.size, PyBytes_AS_STRING(headers), len(headers))
            out.size += len(headers)
        delta = (<_Prepared>prepared[len(prepared) - 1]).delta
        _put_be(out.data, <uint64_t>base_offset, 8)
        _put_be(out.data + 8, <uint64_t>(out.size - _LENGTH_FROM), 4)
        _put_be(out.data + 12, <uint64_t><uint32_t>leader_epoch, 4)
        out.data[16] = 2  # magic
        _put_be(out.data + 21, 0, 2)  # attributes
        _put_be(out.data + 23, <uint64_t>delta, 4)
        _put_be(out.data + 27, <uint64_t>base_ts, 8)
        _put_be(out.data + 35, <uint64_t>max_ts, 8)
        _put_be(out.data + 43, <uint64_t>-1, 8)  # producer id
        _put_be(out.data + 51, <uint64_t>-1, 2)  # producer epoch
        _put_be(out.data + 53, <uint64_t>-1, 4)  # base sequence
        _put_be(out.data + 57, <uint64_t>len(prepared), 4)
        batch = PyBytes_FromStringAndSize(out.data, out.size)
    finally:
        PyMem_Free(out.data)
    # The CRC-32C over everything after it, written into the new batch before anything
    # else holds it.
    crc = crc32c(memoryview(batch)[_HEAD:])
    _put_be(PyBytes_AS_STRING(batch) + 17, <uint32_t>crc, 4)
    return batch


cdef bytes _header_bytes(list headers):
    """A record's headers field: the count, then each name and value."""
    cdef _Out out
    cdef const char *name_data
    cdef Py_ssize_t name_size
    if headers is None:
        return b"\x00"
    out.data = NULL
    out.size = out.capacity = 0
    try:
        _reserve(&out, 10)
        _put_varint(&out, len(headers))
        for name, value in headers:
            name_data = PyUnicode_AsUTF8AndSize(name, &name_size)
            _put_bytes(&out, name_data, name_size)
            if value is None:
                _reserve(&out, 10)
                _put_varint(&out, -1)
            else:
                _put_bytes(&out, PyBytes_AS_STRING(value), len(value))
        return PyBytes_FromStringAndSize(out.data, out.size)
    finally:
        PyMem_Free(out.data)
