# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of :mod:`fmq.protocol.message_requests`: the payloads of the requests
that carry messages (SEND, SEND_BATCH, PREPARE, SEND_AT) read in C, their messages straight
into :class:`fmq.message.Message` objects, where the reference decodes each message into
the wire's field dict and makes the Message from it.

Whatever this code does not take as it is (a length past the end of the payload, text that
is not valid UTF-8, trailing bytes, a count larger than the bytes left) it hands, whole, to
the reference before returning anything: the reference then raises its error, or returns
the value. So the two always give equal Messages or the same error (type and message);
tests/native/test_message_request_twins.py compares them on hostile payloads.

``plain_send`` and ``plain_send_batch`` are the session's short step's decode (reference:
``plain_send_reference``, ``plain_send_batch_reference``): the messages only when each
surely passes ``check_message`` (checked in C as the fields are read), else None, never the
reference's error: the general way decodes such a request again and gives it
(tests/native/test_plain_send_twins.py).

The wire's other fields: PREPARE's producer_group str and tx_id optstr before its list of
messages (u32 count), SEND_AT's deliver_at and delay_ms i64 after its message. The wire's
message struct (docs/protocol.md): topic str (u16 length + UTF-8), body bytes
(u32 length), key and tags optstr (u16 length, 0xFFFF for none), properties (u16 count,
then str key and str value each), queue_id i32 (-1: the broker picks). Big-endian.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr

from fmq.message import MAX_NAME, MAX_PROPERTIES, Message, plain_properties
from fmq.protocol.schema import Op
from fmq.protocol.values import BROKER_PICKS_QUEUE

cdef int32_t _BROKER_PICKS = BROKER_PICKS_QUEUE
cdef unsigned int _NULL16 = 0xFFFF
cdef object _SEND = Op.SEND
cdef object _SEND_BATCH = Op.SEND_BATCH
cdef object _PREPARE = Op.PREPARE
cdef object _SEND_AT = Op.SEND_AT
cdef Py_ssize_t _MAX_NAME = MAX_NAME
cdef Py_ssize_t _MAX_PROPERTIES = MAX_PROPERTIES
cdef object _Message = Message
cdef object _new_object = object.__new__


cdef inline object new_message(object topic, object body, object key, object tags,
                               object properties, object queue_id):
    """fmq.message.new_message here, without its call per message (the same object: a
    Message whose fields are given in one dict)."""
    cdef object message = _new_object(_Message)
    message.__dict__ = {"topic": topic, "body": body, "key": key, "tags": tags,
                        "properties": properties, "queue_id": queue_id}
    return message


cdef inline bint _topic_byte(uint8_t c):
    """A byte of a topic name (fmq.message's _TOPIC_RE): A-Z a-z 0-9 _ . : % | -."""
    return ((c >= 48 and c <= 57) or (c >= 65 and c <= 90) or (c >= 97 and c <= 122)
            or c == 95 or c == 46 or c == 58 or c == 37 or c == 124 or c == 45)


cdef inline bint _ascii(const uint8_t *p, Py_ssize_t n):
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] >= 0x80:
            return False
    return True


cdef class _Reader:
    """A cursor over one payload; ``ok`` turns False at the first thing the C path leaves
    to the reference (nothing read after that is used)."""
    cdef const uint8_t *p
    cdef Py_ssize_t pos
    cdef Py_ssize_t end
    cdef bint ok

    cdef inline bint need(self, Py_ssize_t n):
        if self.end - self.pos < n:
            self.ok = False
            return False
        return True

    cdef inline unsigned int u16(self):
        cdef unsigned int v = (<unsigned int>self.p[self.pos] << 8) | self.p[self.pos + 1]
        self.pos += 2
        return v

    cdef inline uint32_t u32(self):
        cdef const uint8_t *q = self.p + self.pos
        self.pos += 4
        return ((<uint32_t>q[0] << 24) | (<uint32_t>q[1] << 16) | (<uint32_t>q[2] << 8)
                | <uint32_t>q[3])

    cdef inline uint64_t u64(self):
        cdef uint64_t high = self.u32()
        return (high << 32) | self.u32()

    cdef object text(self, Py_ssize_t n):
        """``n`` bytes of UTF-8 at the cursor, or None (``ok`` False) when they are not
        all there or not valid UTF-8 (the reference raises its error for them)."""
        cdef object s
        if not self.need(n):
            return None
        try:
            s = PyUnicode_DecodeUTF8(<const char *>(self.p + self.pos), n, NULL)
        except UnicodeDecodeError:
            self.ok = False
            return None
        self.pos += n
        return s

    cdef object string(self):
        if not self.need(2):
            return None
        return self.text(self.u16())

    cdef object opt_string(self):
        """None for the wire's "no value" (length 0xFFFF), as the reference reads it."""
        if not self.need(2):
            return None
        cdef Py_ssize_t n = self.u16()
        return None if n == _NULL16 else self.text(n)

    cdef object message(self):
        """The next message, or None (``ok`` False) when the reference is to decide."""
        cdef object topic, body, key, tags, name, value
        cdef dict properties
        cdef Py_ssize_t n
        cdef unsigned int count, i
        cdef int32_t queue_id
        topic = self.string()
        if not self.ok or not self.need(4):
            return None
        n = self.u32()
        if not self.need(n):
            return None
        body = PyBytes_FromStringAndSize(<const char *>(self.p + self.pos), n)
        self.pos += n
        key = self.opt_string()
        if not self.ok:
            return None
        tags = self.opt_string()
        if not self.ok or not self.need(2):
            return None
        count = self.u16()
        properties = {}
        for i in range(count):
            name = self.string()
            if not self.ok:
                return None
            value = self.string()
            if not self.ok:
                return None
            properties[name] = value
        if not self.need(4):
            return None
        queue_id = <int32_t>self.u32()
        # As message_from_wire makes it from the wire's fields.
        return new_message(topic, body, key, tags, properties or None,
                           None if queue_id == _BROKER_PICKS else queue_id)

    cdef object plain_label(self):
        """An optstr that passes check_label (no NUL, at most MAX_NAME bytes), None for
        none; ``plain`` False (and None) for one that does not."""
        if not self.need(2):
            return None
        cdef Py_ssize_t n = self.u16()
        if n == _NULL16:
            return None
        if n > _MAX_NAME or not self.need(n) or memchr(self.p + self.pos, 0, n) != NULL:
            self.ok = False
            return None
        return self.text(n)

    cdef object plain_message(self, Py_ssize_t max_size):
        """The next message when it surely passes check_message (see
        fmq.protocol.message_requests.plain_message), else None (``ok`` False)."""
        cdef object topic, body, key, tags, name, value
        cdef dict properties
        cdef Py_ssize_t n, k, v, size
        cdef unsigned int count, i
        cdef bint plain
        cdef const uint8_t *q
        if not self.need(2):
            return None
        n = self.u16()
        # A topic name of 1-127 of its bytes, not internal ("%..."): ASCII, so it decodes.
        if n < 1 or n > 127 or not self.need(n) or self.p[self.pos] == 37:
            self.ok = False
            return None
        q = self.p + self.pos
        for k in range(n):
            if not _topic_byte(q[k]):
                self.ok = False
                return None
        topic = self.text(n)
        if not self.ok or not self.need(4):
            return None
        n = self.u32()
        if n > max_size or not self.need(n):
            self.ok = False
            return None
        body = PyBytes_FromStringAndSize(<const char *>(self.p + self.pos), n)
        self.pos += n
        key = self.plain_label()
        if not self.ok:
            return None
        tags = self.plain_label()
        if not self.ok or not self.need(2):
            return None
        count = self.u16()
        properties = {}
        plain = True  # every name and value ASCII, no name starting with "%"
        size = 2
        for i in range(count):
            if not self.need(2):
                return None
            k = self.u16()
            if self.need(k):
                plain = (plain and (k == 0 or self.p[self.pos] != 37)
                         and _ascii(self.p + self.pos, k))
            name = self.text(k)
            if not self.ok or not self.need(2):
                return None
            v = self.u16()
            if self.need(v):
                plain = plain and _ascii(self.p + self.pos, v)
            value = self.text(v)
            if not self.ok:
                return None
            properties[name] = value
            size += 4 + k + v
        if not self.need(4):
            return None
        if <int32_t>self.u32() != _BROKER_PICKS:  # a queue id: checked against its topic
            self.ok = False
            return None
        if len(properties) != count:
            # A name repeated: the last value stands, and the dict is what is checked.
            plain = plain_properties(properties)
        elif size > _MAX_PROPERTIES:
            plain = False
        if not plain:
            self.ok = False
            return None
        return new_message(topic, body, key, tags, properties or None, None)

    cdef list messages(self):
        """A list of messages (u32 count), or None (``ok`` False)."""
        cdef uint32_t count, i
        cdef list out
        if not self.need(4):
            return None
        count = self.u32()
        # The reference's bound: every item takes at least one byte.
        if count > <uint32_t>(self.end - self.pos):
            self.ok = False
            return None
        out = []
        for i in range(count):
            message = self.message()
            if not self.ok:
                return None
            out.append(message)
        return out


cdef enum _Kind:
    _K_SEND
    _K_SEND_BATCH
    _K_PREPARE
    _K_SEND_AT


cdef dict _fields(_Reader reader, _Kind kind):
    """The request's fields read from ``reader``, or None when the reference is to decide
    (``ok`` False, or bytes left after the last field)."""
    cdef dict fields
    cdef int64_t deliver_at, delay_ms
    if kind == _K_SEND:
        fields = {"message": reader.message()}
    elif kind == _K_SEND_BATCH:
        fields = {"messages": reader.messages()}
    elif kind == _K_PREPARE:
        group = reader.string()
        tx_id = reader.opt_string() if reader.ok else None
        messages = reader.messages() if reader.ok else None
        fields = {"producer_group": group, "tx_id": tx_id, "messages": messages}
    else:
        message = reader.message()
        if not reader.ok or not reader.need(16):
            return None
        deliver_at = <int64_t>reader.u64()
        delay_ms = <int64_t>reader.u64()
        fields = {"message": message, "deliver_at": deliver_at, "delay_ms": delay_ms}
    if not reader.ok or reader.pos != reader.end:
        return None
    return fields


cdef class MessageDecoder:
    """``send``, ``send_batch``, ``prepare`` and ``send_at`` of a payload, as
    ``reference(opcode, payload)`` (given here) answers them."""
    cdef object _reference

    def __init__(self, reference):
        self._reference = reference

    cdef object _decode(self, _Kind kind, object opcode, object payload):
        cdef Py_buffer view
        cdef dict fields = None
        if not _open(payload, &view):
            return self._reference(opcode, payload)
        try:
            fields = _fields(_start(view), kind)
        finally:
            PyBuffer_Release(&view)
        return fields if fields is not None else self._reference(opcode, payload)

    def send(self, payload):
        """``{"message": Message}`` from a SEND payload."""
        return self._decode(_K_SEND, _SEND, payload)

    def send_batch(self, payload):
        """``{"messages": [Message, ...]}`` from a SEND_BATCH payload."""
        return self._decode(_K_SEND_BATCH, _SEND_BATCH, payload)

    def prepare(self, payload):
        """``{"producer_group", "tx_id", "messages"}`` from a PREPARE payload."""
        return self._decode(_K_PREPARE, _PREPARE, payload)

    def plain_send(self, payload, Py_ssize_t max_size):
        """A SEND payload's Message when it surely passes check_message with bodies of at
        most ``max_size`` bytes, else None (fmq.protocol.message_requests.plain_send_reference;
        None too for a payload that is not flat bytes)."""
        cdef Py_buffer view
        cdef _Reader reader
        cdef object message = None
        if not _open(payload, &view):
            return None
        try:
            reader = _start(view)
            message = reader.plain_message(max_size)
            if not reader.ok or reader.pos != reader.end:
                message = None
        finally:
            PyBuffer_Release(&view)
        return message

    def plain_send_batch(self, payload, Py_ssize_t max_size):
        """A SEND_BATCH payload's Messages when there is one at least and each is plain, as
        :meth:`plain_send` has it, else None
        (fmq.protocol.message_requests.plain_send_batch_reference)."""
        cdef Py_buffer view
        cdef _Reader reader
        cdef list messages = None
        cdef uint32_t count, i
        if not _open(payload, &view):
            return None
        try:
            reader = _start(view)
            if reader.need(4):
                count = reader.u32()
                # The reference's bound: every item takes at least one byte.
                if count == 0 or count > <uint32_t>(reader.end - reader.pos):
                    reader.ok = False
                messages = []
                i = 0
                while reader.ok and i < count:
                    message = reader.plain_message(max_size)
                    if reader.ok:
                        messages.append(message)
                    i += 1
            if not reader.ok or reader.pos != reader.end:
                messages = None
        finally:
            PyBuffer_Release(&view)
        return messages

    def send_at(self, payload):
        """``{"message", "deliver_at", "delay_ms"}`` from a SEND_AT payload."""
        return self._decode(_K_SEND_AT, _SEND_AT, payload)


cdef bint _open(object payload, Py_buffer *view):
    """Whether ``payload``'s bytes are open in ``view`` (release it); False: the reference
    reads this payload (not flat bytes, or not contiguous)."""
    if not _flat_bytes(payload):
        return False
    try:
        PyObject_GetBuffer(payload, view, PyBUF_SIMPLE)
    except BufferError:
        return False
    return True


cdef inline bint _flat_bytes(object obj):
    """Bytes read here as they are: bytes, bytearray, a one-dimensional view of bytes (not
    a view of wider items, whose length counts items: the reference reads those)."""
    kind = type(obj)
    return (kind is bytes or kind is bytearray or
            (kind is memoryview and obj.format == "B" and obj.ndim == 1))


cdef _Reader _start(Py_buffer view):
    cdef _Reader reader = _Reader.__new__(_Reader)
    reader.p = <const uint8_t *>view.buf
    reader.pos = 0
    reader.end = view.len
    reader.ok = True
    return reader
